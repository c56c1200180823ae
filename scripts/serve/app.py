"""The Ray Serve application: an OpenAI-compatible front door with one Triton per replica.

Routes (FastAPI ingress): ``GET /generate?query=...&max_tokens=...``, ``POST /v1/chat/completions``
(plain or ``stream: true`` Server-Sent Events ending in ``data: [DONE]``), ``POST /v1/completions``,
``GET /v1/models`` and ``GET /health``. Each replica starts its own Triton on the filled model
repository (:mod:`scripts.triton.client`) and reports healthy to Serve only while Triton's
``ensemble`` model is ready.

Run it::

    serve run scripts.serve.app:app                               # development, profile cpu
    serve run scripts.serve.app:app_builder profile=cpu mode=managed
    ray start --head && serve deploy env/serve/cpu.yaml           # a running cluster

``env/serve/<profile>.yaml`` is the ``serve build``-style config with the autoscaling and resource
settings of :func:`deployment_options`; the capacity checker reads the same file.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, AsyncIterator

import yaml
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from scripts.serve.openai_api import (SSE_DONE, Generation, IncrementalDetokenizer, OpenAIError, StopTrimmer, chunk_body,
                                finish_reason, models_body, parse_chat_request, parse_completion_request,
                                resolve_max_tokens, response_body, sse, usage)
from scripts.paths import SERVE_CONFIG_DIR, triton_repo_dir
from scripts.profiles import Profile, load_profile
from scripts.triton.client import Chunk, EnsembleRequest, TritonRequestError, ensemble_inputs, make_backend
from scripts.triton.repository.fill import RepoSettings, fill_for_profile, repository_facts

APP_NAME = "llm"
DEPLOYMENT_NAME = "TritonLLM"
BUILDER_ARGS = ("profile", "model_repository", "mode", "served_model_name")

api = FastAPI(title="LLM on Triton behind Ray Serve", description="OpenAI-compatible routes over a Triton ensemble")


@api.exception_handler(OpenAIError)
async def _openai_error(_request: Request, exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


@api.exception_handler(RequestValidationError)
async def _query_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    err = exc.errors()[0]
    param = str(err["loc"][-1]) if err.get("loc") else None
    message = f"'{param}' is required" if err["type"] == "missing" else f"'{param}': {err['msg'].rstrip('.')}"
    return JSONResponse(OpenAIError(400, message, param=param).body(), status_code=400)


def triton_failed(exc: TritonRequestError) -> OpenAIError:
    """What a client sees when Triton refuses or fails a request the app had accepted."""
    return OpenAIError(500, f"Triton could not serve the request: {exc}", type="server_error")


def serve_repo_dir(profile: Profile) -> Path:
    """The Serve application's model repository: notebook 02's models filled with ``decoupled_mode: true``."""
    return triton_repo_dir(f"{profile.name}-serve")


def fill_serve_repository(profile: Profile, settings: RepoSettings | None = None) -> dict[str, Any]:
    """Fill the repository the replicas load. Streaming needs the engine (and so the ensemble) to
    be decoupled: a model that is not may send only one response per request."""
    settings = settings or RepoSettings(decoupled_mode=True)
    return fill_for_profile(profile, settings, output_dir=serve_repo_dir(profile))


@serve.deployment(name=DEPLOYMENT_NAME)
@serve.ingress(api)
class TritonDeployment:
    """One replica: one Triton (in-process or a managed process) and the OpenAI routes over it."""

    def __init__(self, model_repository: str, served_model_name: str, default_max_tokens: int = 64,
                 mode: str = "auto", model_name: str = "ensemble", ready_timeout_s: float = 600):
        from transformers import AutoTokenizer  # noqa: PLC0415 - heavy; replicas only

        repo = Path(model_repository)
        self.facts = repository_facts(repo, model_name)
        self.tokenizer = AutoTokenizer.from_pretrained(self.facts.tokenizer_dir)
        self.vocab_size = len(self.tokenizer)
        self.served_model_name, self.default_max_tokens = served_model_name, int(default_max_tokens)
        self.created = int(time.time())
        self.backend = make_backend(repo, model_name, mode, ready_timeout_s)

    # -- Serve hooks ------------------------------------------------------------------------
    async def check_health(self) -> None:
        """Serve calls this periodically: a replica whose Triton model is not ready is replaced."""
        if not await self.backend.ready():
            raise RuntimeError(f"Triton model {self.backend.info()['model']!r} is not ready")

    def __del__(self):
        # Serve calls __del__ when it stops a replica (downscaling, redeploys, serve.shutdown).
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.stop()

    def triton_info(self) -> dict[str, Any]:
        """This replica's Triton (mode, URLs, PID) and the replica's id; for handles, not HTTP."""
        context = serve.get_replica_context()
        return self.backend.info() | {"replica": context.replica_id.unique_id, "replica_pid": os.getpid(),
                                      "decoupled": self.facts.decoupled}

    # -- routes -----------------------------------------------------------------------------
    @api.get("/health")
    async def health(self) -> JSONResponse:
        ready = await self.backend.ready()
        return JSONResponse({"status": "ok" if ready else "loading"}, status_code=200 if ready else 503)

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return models_body(self.served_model_name, self.created)

    @api.get("/generate")
    async def generate(self, query: str = Query(..., description="the prompt"),
                       max_tokens: int = Query(64, description="tokens to generate at most")) -> dict[str, Any]:
        """The first seed's route: greedy text for a prompt."""
        if not query.strip():
            raise OpenAIError(400, "'query' is empty: send some text", param="query")
        if max_tokens <= 0:
            raise OpenAIError(400, f"'max_tokens' must be at least 1, got {max_tokens}", param="max_tokens")
        body = await self._complete(Generation("completion", self.served_model_name, query, max_tokens))
        return {"text": body["choices"][0]["text"], "usage": body["usage"]}

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        gen = parse_chat_request(await request.body(), self.served_model_name, self.tokenizer)
        return await self._respond(gen)

    @api.post("/v1/completions")
    async def completions(self, request: Request):
        gen = parse_completion_request(await request.body(), self.served_model_name)
        return await self._respond(gen)

    # -- the work ---------------------------------------------------------------------------
    def _prepare(self, gen: Generation) -> tuple[dict, int, int]:
        prompt_tokens = len(self.tokenizer(gen.prompt)["input_ids"])  # as the preprocessing model counts them
        max_tokens = resolve_max_tokens(gen, prompt_tokens, self.facts.max_model_len, self.default_max_tokens)
        request = EnsembleRequest(gen.prompt, max_tokens, stream=gen.stream and self.facts.decoupled,
                                  temperature=gen.temperature, top_p=gen.top_p, stop=gen.stop, seed=gen.seed,
                                  presence_penalty=gen.presence_penalty, frequency_penalty=gen.frequency_penalty)
        return ensemble_inputs(request, self.vocab_size), prompt_tokens, max_tokens

    async def _respond(self, gen: Generation):
        if not gen.stream:
            return await self._complete(gen)
        inputs, prompt_tokens, max_tokens = self._prepare(gen)
        chunks = self.backend.generate(inputs)
        try:  # the first response before the 200: a request Triton refuses still gets its error status
            first = await anext(chunks, None)
        except TritonRequestError as exc:
            raise triton_failed(exc) from None
        return StreamingResponse(self._events(gen, first, chunks, prompt_tokens, max_tokens), media_type="text/event-stream")

    async def _complete(self, gen: Generation) -> dict[str, Any]:
        inputs, prompt_tokens, max_tokens = self._prepare(gen)
        trimmer, text, tokens = StopTrimmer(gen.stop), [], 0
        try:
            async for chunk in self.backend.generate(inputs):
                text.append(trimmer.feed(chunk.text))
                tokens += chunk.tokens
        except TritonRequestError as exc:
            raise triton_failed(exc) from None
        text.append(trimmer.finish())
        reason = "stop" if trimmer.stopped else finish_reason(tokens, max_tokens)
        return response_body(gen, "".join(text), reason, prompt_tokens, tokens)

    async def _events(self, gen: Generation, first: Chunk | None, chunks: AsyncIterator[Chunk], prompt_tokens: int,
                      max_tokens: int) -> AsyncIterator[str]:
        if gen.kind == "chat":
            yield sse(chunk_body(gen, text="", role=True))
        trimmer, tokens = StopTrimmer(gen.stop), 0
        # Each response's text_output is decoded alone, which breaks a character whose bytes span
        # two responses; the ids are decoded incrementally instead.
        detokenizer = IncrementalDetokenizer(self.tokenizer, self.facts.skip_special_tokens)
        try:
            chunk = first
            while chunk is not None:
                tokens += chunk.tokens
                text = trimmer.feed(chunk.text if chunk.ids is None else detokenizer.feed(chunk.ids))
                if text:
                    yield sse(chunk_body(gen, text=text))
                chunk = await anext(chunks, None)
        except TritonRequestError as exc:
            yield sse(triton_failed(exc).body())
            yield SSE_DONE
            return
        rest = trimmer.feed(detokenizer.finish())
        rest += trimmer.finish()
        if rest:
            yield sse(chunk_body(gen, text=rest))
        yield sse(chunk_body(gen, reason="stop" if trimmer.stopped else finish_reason(tokens, max_tokens)))
        if gen.include_usage:
            yield sse(chunk_body(gen, usage_counts=usage(prompt_tokens, tokens)))
        yield SSE_DONE


# -- configuration: options from the profile, the serve-build YAML, the application builder ----

def deployment_options(profile: Profile) -> dict[str, Any]:
    """``Deployment.options`` from the profile: resources per replica and the autoscaling policy.

    GPU profiles must ask for ``num_gpus``: without it Ray may place a replica on a node with no
    GPU (or share one GPU between replicas), and Triton then fails to load the engine.
    """
    return {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": profile["serve_max_ongoing_requests"],
        "autoscaling_config": {
            "min_replicas": profile["serve_min_replicas"],
            "max_replicas": profile["serve_max_replicas"],
            "target_ongoing_requests": profile["serve_target_ongoing_requests"],
            "upscale_delay_s": profile["serve_upscale_delay_s"],
            "downscale_delay_s": profile["serve_downscale_delay_s"],
        },
        "ray_actor_options": {"num_cpus": profile["serve_num_cpus_per_replica"],
                              "num_gpus": profile["num_gpus_per_replica"]},
        "health_check_period_s": 10,
        "health_check_timeout_s": 30,
        # Serve kills a replica that takes longer to stop: leave room for Triton's exit timeout and
        # the launcher's grace periods, so the replica's __del__ stops every process of its Triton.
        "graceful_shutdown_timeout_s": 60,
    }


def app_config(profile: Profile, http_port: int = 8000) -> dict[str, Any]:
    """The ``serve build``-style config of the application (what ``serve deploy`` takes)."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "127.0.0.1", "port": http_port},
        "applications": [{
            "name": APP_NAME,
            "route_prefix": "/",
            "import_path": "scripts.serve.app:app_builder",
            "args": {"profile": profile.name},
            "deployments": [deployment_options(profile)],
        }],
    }


def config_path(profile_name: str) -> Path:
    return SERVE_CONFIG_DIR / f"{profile_name}.yaml"


def render_app_config(profile: Profile) -> str:
    header = (f"# Ray Serve config of the LLM application, profile {profile.name} (`serve deploy` this file on a cluster\n"
              "# started with `ray start --head`). Generated from env/profiles.toml by scripts.serve.app; a unit test\n"
              "# keeps the two in step. The capacity checker reads it: python -m scripts.capacity --serve-config ...\n")
    return header + yaml.safe_dump(app_config(profile), sort_keys=False)


def app_builder(args: dict[str, Any] | None = None):
    """The application for ``serve run`` / ``serve deploy`` (``import_path: scripts.serve.app:app_builder``).

    ``args``: ``profile`` (default cpu), ``model_repository`` (default ``build/triton_repo/<profile>-serve``;
    relative paths are relative to the repository root), ``mode`` (auto | managed | in-process),
    ``served_model_name``.
    """
    args = dict(args or {})
    unknown = sorted(set(args) - set(BUILDER_ARGS))
    if unknown:
        raise ValueError(f"unknown application argument(s) {unknown}: use {list(BUILDER_ARGS)}")
    profile = load_profile(str(args.get("profile", "cpu")))
    repo = Path(args["model_repository"]) if args.get("model_repository") else serve_repo_dir(profile)
    repo = repo if repo.is_absolute() else REPO_ROOT / repo
    if not (repo / "ensemble" / "config.pbtxt").is_file():
        raise FileNotFoundError(f"{repo} holds no filled ensemble: run notebooks 00-02 and fill_serve_repository "
                                "(notebook 05 does)")
    options = deployment_options(profile)
    return TritonDeployment.options(**options).bind(
        str(repo.resolve()), str(args.get("served_model_name") or profile["served_model_name"]),
        int(profile["serve_default_max_tokens"]), str(args.get("mode", "auto")))


def __getattr__(name: str):
    # `serve run scripts.serve.app:app` builds the default application on first access only, so
    # importing this module (as every replica does) needs no filled repository.
    if name == "app":
        return app_builder({})
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> int:
    """Write ``env/serve/<profile>.yaml`` from the profiles (``--check``: fail if they differ)."""
    import argparse  # noqa: PLC0415

    from scripts.profiles import available_profiles  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for name in available_profiles():
        text, path = render_app_config(load_profile(name)), config_path(name)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date with env/profiles.toml: {', '.join(stale)} (python -m scripts.serve.app)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
