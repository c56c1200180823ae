"""The Ray Serve application: an OpenAI-compatible front door with one Triton per replica.

Why it is built this way, and the sources: docs/design/serve.md.
"""
from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from scripts.model.tokenizer import load_tokenizer
from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile
from scripts.serve.config import (APP_NAME, DEPLOYMENT_NAME, config_path, deployment_options, fill_serve_repository,
                                  serve_repo_dir)
from scripts.serve.openai_api import ChatCompletionRequest, CompletionRequest, OpenAIError
from scripts.serve.openai_schema import (GUARDED, ChatCompletion, ChatCompletionChunk, GenerateResponse, HealthResponse,
                                         ModelList, TextCompletion, TextCompletionChunk, complete_openapi, errors,
                                         json_request, streamed)
from scripts.serve.service import LLMService, Reply
from scripts.triton.client import make_backend
from scripts.triton.engine_request import EngineInputs
from scripts.triton.repository.fill import repository_facts

# The application's names, and those of scripts.serve.config that notebook 05 imports from here.
__all__ = ["APP_NAME", "DEPLOYMENT_NAME", "BUILDER_ARGS", "TritonDeployment", "TritonReplica", "api", "app_builder",
           "config_path", "fill_serve_repository", "replica_service", "serve_repo_dir"]

BUILDER_ARGS = ("profile", "model_repository", "mode", "served_model_name", "triton_model", "triton_url", "num_replicas",
                "num_gpus", "max_replicas")

#: What a replica calls in Triton: the ensemble (preprocessing -> engine -> postprocessing: the
#: TensorRT-LLM contract of notebooks 02-04), or the decoupled engine model itself (token ids in and
#: out; the replica tokenizes and detokenizes, two Python-backend hops fewer per request).
TRITON_MODELS = ("ensemble", "engine")

#: The one setting that turns on the bearer-token check: the key, in the replicas' environment
#: (``runtime_env: {env_vars: {TUTORIAL_API_KEY: ...}}``, or exported before ``ray start``/``serve run``).
API_KEY_ENV = "TUTORIAL_API_KEY"


class _DescribedAPI(FastAPI):
    """FastAPI whose ``/openapi.json`` also has the request bodies that the routes parse themselves
    (:func:`scripts.serve.openai_schema.complete_openapi`)."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            self.openapi_schema = complete_openapi(super().openapi())
        return self.openapi_schema


api = _DescribedAPI(title="LLM on Triton behind Ray Serve", description="OpenAI-compatible routes over a Triton ensemble")


@api.exception_handler(OpenAIError)
async def _openai_error(_request: Request, exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


@api.exception_handler(RequestValidationError)
async def _query_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    err = exc.errors()[0]
    param = str(err["loc"][-1]) if err.get("loc") else None
    message = f"'{param}' is required" if err["type"] == "missing" else f"'{param}': {err['msg'].rstrip('.')}"
    return JSONResponse(OpenAIError(400, message, param=param).body(), status_code=400)


# -- routes: each hands the request to the service of the replica that received it -----------

async def replica_service() -> LLMService:
    """The service of the replica handling this request (a FastAPI dependency; tests override it)."""
    return serve.get_replica_context().servable_object.service


Service = Annotated[LLMService, Depends(replica_service)]


async def require_api_key(request: Request, service: Service) -> None:
    """401 unless the request carries ``Authorization: Bearer <key>`` when the replica has a key
    (as OpenAI and ``vllm serve --api-key`` answer; the ``openai`` client sends its ``api_key`` so)."""
    if service.api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), service.api_key.encode()):
        raise OpenAIError(401, f"missing or wrong API key: send the header 'Authorization: Bearer <key>' with the key "
                          f"the server was given in ${API_KEY_ENV}", code="invalid_api_key")


async def json_body(request: Request, service: Service) -> bytes:
    """The raw body of a JSON route: 415 for another content type, 413 beyond the service's limit
    (checked on ``Content-Length`` before anything is read, and while reading a chunked body)."""
    media_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise OpenAIError(415, f"the body must be JSON sent as 'Content-Type: application/json', got {media_type!r} "
                          "(curl -d sends form data unless given -H 'Content-Type: application/json')")
    limit = service.max_body_bytes
    too_large = OpenAIError(413, f"the request body is larger than this server's limit of {limit} bytes: "
                            f"the model's context ({service.facts.max_model_len} tokens) cannot hold it anyway")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise too_large
    return bytes(body)


Authorized = [Depends(require_api_key)]
Body = Annotated[bytes, Depends(json_body)]


def _reply(reply: Reply) -> Any:
    return reply if isinstance(reply, dict) else StreamingResponse(reply, media_type="text/event-stream")


@api.get("/health", response_model=HealthResponse, summary="Whether Triton's model is ready (no API key needed)",
         responses={503: {"model": HealthResponse, "description": "Triton's model is not ready (loading, or gone)."}})
async def health(service: Service) -> JSONResponse:
    status, body = await service.health()
    return JSONResponse(body, status_code=status)


@api.get("/v1/models", dependencies=Authorized, response_model=ModelList, openapi_extra=GUARDED, responses=errors(401))
async def models(service: Service) -> dict[str, Any]:
    return service.models()


@api.get("/generate", dependencies=Authorized, response_model=GenerateResponse, openapi_extra=GUARDED,
         responses=errors(400, 401, 500, 503))
async def generate(service: Service, query: str = Query(..., description="the prompt", examples=["Ray Serve takes"]),
                   max_tokens: int = Query(64, description="tokens to generate at most", examples=[16]),
                   ) -> dict[str, Any]:
    """The first seed's route: greedy text for a prompt."""
    return await service.generate(query, max_tokens)


@api.post("/v1/chat/completions", dependencies=Authorized, response_model=ChatCompletion,
          openapi_extra=GUARDED | json_request(ChatCompletionRequest,
                                               {"messages": [{"role": "user", "content": "What is Triton?"}]}),
          responses=streamed(ChatCompletionChunk) | errors(400, 401, 404, 413, 415, 500, 503))
async def chat_completions(body: Body, service: Service):
    return _reply(await service.chat_completions(body))


@api.post("/v1/completions", dependencies=Authorized, response_model=TextCompletion,
          openapi_extra=GUARDED | json_request(CompletionRequest, {"prompt": "Ray Serve takes"}),
          responses=streamed(TextCompletionChunk) | errors(400, 401, 404, 413, 415, 500, 503))
async def completions(body: Body, service: Service):
    return _reply(await service.completions(body))


# -- the replica ------------------------------------------------------------------------------

class TritonReplica:
    """One replica: one Triton (in-process or a managed process) and the service over it."""

    def __init__(self, model_repository: str, served_model_name: str, default_max_tokens: int = 64,
                 mode: str = "auto", triton_model: str = "ensemble", ready_timeout_s: float = 600,
                 triton_url: str | None = None):
        repo = Path(model_repository)
        facts = repository_facts(repo)
        tokenizer = load_tokenizer(facts.tokenizer_dir)  # before Triton: a broken tokenizer fails fast
        if triton_model not in TRITON_MODELS:
            raise ValueError(f"triton_model must be one of {TRITON_MODELS}, got {triton_model!r}")
        engine = EngineInputs(repo, facts.engine_model) if triton_model == "engine" else None
        model_name = facts.engine_model if engine is not None else "ensemble"
        backend = make_backend(repo, model_name, mode, ready_timeout_s, triton_url)
        self.service = LLMService(backend, facts, tokenizer, served_model_name, default_max_tokens,
                                  api_key=os.environ.get(API_KEY_ENV) or None, engine=engine)

    async def check_health(self) -> None:
        """Serve calls this periodically: a replica whose Triton model is not ready is replaced."""
        await self.service.check_ready()

    def triton_info(self) -> dict[str, Any]:
        """This replica's Triton (mode, URLs, PID) and the replica's id; for handles, not HTTP."""
        return self.service.triton_info(serve.get_replica_context().replica_id.unique_id)

    def __del__(self):
        # Serve calls __del__ when it stops a replica (downscaling, redeploys, serve.shutdown).
        service = getattr(self, "service", None)
        if service is not None:
            service.close()


# `@serve.deployment(name=...)` and `@serve.ingress(api)` applied as calls: the same deployment as
# the decorated class, and TritonReplica stays a plain class that tests can build without Serve.
TritonDeployment = serve.deployment(name=DEPLOYMENT_NAME)(serve.ingress(api)(TritonReplica))


# -- the application --------------------------------------------------------------------------

def replica_options(profile, *, attached: bool = False, num_replicas: int | None = None,
                    num_gpus: float | None = None, max_replicas: int | None = None) -> dict[str, Any]:
    """``Deployment.options`` of the application: the profile's, with a fixed count of replicas where
    asked (benchmarks), another ``num_gpus`` per replica (a share of one GPU: ``num_gpus: 0.5`` puts two
    replicas on it, :mod:`scripts.capacity.gpu_sharing` checks that their engines fit) or another
    ``max_replicas``. A replica attached to a shared Triton holds no engine, so it asks for no GPU:
    the GPU is that Triton's, and a second application asking for it would stay pending on a
    one-GPU node (``serve.run`` waits for it without end)."""
    options = deployment_options(profile)
    if num_gpus is not None:
        if not profile["num_gpus_per_replica"]:
            raise ValueError(f"profile {profile.name}'s replicas ask for no GPU: num_gpus does not apply")
        if not 0 < float(num_gpus) <= 1:
            raise ValueError(f"num_gpus must be a share of one GPU in (0, 1], got {num_gpus!r}: a replica without "
                             "a GPU cannot run its engine, and one that needs several asks for them whole")
        options["ray_actor_options"] = {**options["ray_actor_options"], "num_gpus": float(num_gpus)}
    if max_replicas is not None:
        if int(max_replicas) < options["autoscaling_config"]["min_replicas"]:
            raise ValueError(f"max_replicas {max_replicas!r} is below the profile's min_replicas "
                             f"{options['autoscaling_config']['min_replicas']}")
        options["autoscaling_config"] = {**options["autoscaling_config"], "max_replicas": int(max_replicas)}
    if num_replicas is not None:  # a fixed count instead of the profile's autoscaling
        del options["autoscaling_config"]
        options["num_replicas"] = int(num_replicas)
    if attached:
        options["ray_actor_options"] = {**options["ray_actor_options"], "num_gpus": 0}
    return options


def app_builder(args: dict[str, Any] | None = None):
    """The application for ``serve run`` / ``serve deploy`` (``import_path: scripts.serve.app:app_builder``).

    ``args``: ``profile`` (default cpu), ``model_repository`` (default ``build/triton_repo/<profile>-serve``;
    relative paths are relative to the repository root), ``mode`` (auto | managed | in-process |
    attached), ``served_model_name``, ``triton_model`` (ensemble | engine; default the profile's
    ``serve_triton_model``), ``triton_url`` (the gRPC address of a running Triton that every replica
    shares: mode attached), ``num_replicas``, ``num_gpus``, ``max_replicas`` (:func:`replica_options`).
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
    mode = str(args.get("mode", "attached" if args.get("triton_url") else "auto"))
    options = replica_options(profile, attached=mode == "attached", num_replicas=args.get("num_replicas"),
                              num_gpus=args.get("num_gpus"), max_replicas=args.get("max_replicas"))
    return TritonDeployment.options(**options).bind(
        str(repo.resolve()), str(args.get("served_model_name") or profile["served_model_name"]),
        int(profile["serve_default_max_tokens"]), mode,
        str(args.get("triton_model") or profile["serve_triton_model"]),
        triton_url=args.get("triton_url"))


def __getattr__(name: str):
    # `serve run scripts.serve.app:app` builds the default application on first access only, so
    # importing this module (as every replica does) needs no filled repository.
    if name == "app":
        return app_builder({})
    raise AttributeError(name)
