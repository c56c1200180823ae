"""Stand-ins the unit tests share: a tokenizer, a Triton backend and ensemble, and the Serve
application's routes answered by a service over a fake Triton (in-process or on a loopback port)."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

from scripts.serve.service import LLMService
from scripts.triton.client import Chunk, TritonRequestError
from scripts.triton.repository.fill import RepositoryFacts


class FakeTokenizer:
    """A tokenizer with a Llama-style chat template that starts with BOS, and BOS added on encode:
    one token per character (its code point), so a prompt's token count is its length plus one."""

    bos_token, bos_token_id, eos_token, eos_token_id, pad_token_id = "<s>", 0, "</s>", 1, None
    chat_template = "template"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}

    def __len__(self):
        return 100

    def convert_ids_to_tokens(self, ids):
        return [chr(i) for i in ids]

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        text = "<s>" + "".join(f"<|{m['role']}|>\n{m['content']}</s>\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")


class ByteTokenizer(FakeTokenizer):
    """Byte-level decoding: one token per UTF-8 byte, as byte-level BPE has for rare characters."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


#: What the fake Triton answers by default: three responses, four tokens.
CHUNKS = [Chunk("Triton", 1), Chunk(" loads", 1), Chunk(" the model", 2)]
CHUNKS_TEXT = "Triton loads the model"


class FakeBackend:
    """A started Triton (:class:`scripts.triton.client.TritonLLM`) that answers every request with
    ``chunks``; with ``fail=i`` it raises Triton's request error (``error``) instead of sending chunk ``i``."""

    mode = "fake"

    def __init__(self, chunks=CHUNKS, fail=None, error=None):
        self.chunks, self.fail, self.calls, self.is_ready, self.stops = list(chunks), fail, [], True, 0
        self.parameters, self.error = [], error or TritonRequestError("engine failed")

    async def ready(self):
        return self.is_ready

    async def generate(self, inputs, parameters=None):
        self.calls.append(inputs)
        self.parameters.append(parameters)
        for i, chunk in enumerate(self.chunks):
            if self.fail is not None and i == self.fail:
                raise self.error
            yield chunk

    def info(self):
        return {"mode": self.mode, "model": "ensemble"}

    def stop(self):
        self.stops += 1


class FakeEnsemble:
    """:class:`scripts.triton.client.GrpcModel` without a Triton: ``chunks`` for every request."""

    def __init__(self, chunks=CHUNKS):
        self.chunks, self.requests, self.closed = list(chunks), 0, False

    async def generate(self, inputs, parameters=None):
        self.requests += 1
        for chunk in self.chunks:
            yield chunk

    async def close(self):
        self.closed = True


FACTS = RepositoryFacts("tok", max_model_len=64, engine_model="vllm_engine", decoupled=True)


def fake_service(chunks=CHUNKS, fail=None, decoupled=True, tokenizer=None, default_max_tokens=8,
                 max_model_len=FACTS.max_model_len) -> LLMService:
    """The service as a replica builds it, over :class:`FakeBackend` (a 64-token model unless told)."""
    facts = RepositoryFacts(FACTS.tokenizer_dir, max_model_len, FACTS.engine_model, decoupled)
    return LLMService(FakeBackend(chunks, fail), facts, tokenizer or FakeTokenizer(), "tiny-llama", default_max_tokens)


def long_service(**kw) -> LLMService:
    """:func:`fake_service` with room for the chat data's questions (the fake tokenizer spends a token
    per character): what the chat clients and loads send."""
    return fake_service(max_model_len=4096, **kw)


def closed_port_url() -> str:
    """A loopback URL where nothing listens."""
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again once this returns


@contextlib.contextmanager
def routes_answered_by(service: LLMService) -> Iterator[Any]:
    """The Serve application's FastAPI app with its routes handed to ``service`` (where Serve
    would hand them to the replica's), for ``TestClient`` or a real server."""
    from scripts.serve.app import api, replica_service  # noqa: PLC0415 - imports Ray Serve

    async def this_service():
        return service

    api.dependency_overrides[replica_service] = this_service
    try:
        yield api
    finally:
        api.dependency_overrides.pop(replica_service, None)


@contextlib.contextmanager
def in_a_thread(app: Any, name: str) -> Iterator[str]:
    """An ASGI ``app`` served by uvicorn on a free loopback port, from a thread; yields the base URL."""
    import uvicorn  # noqa: PLC0415

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextlib.contextmanager
def serving(service: LLMService) -> Iterator[str]:
    """The routes over ``service`` on a free loopback port, from a thread; yields the base URL."""
    with routes_answered_by(service) as app, in_a_thread(app, "fake-serve") as url:
        yield url


def embedded_png_bytes(fig: Any) -> int:
    """Bytes of ``fig`` as the notebook file holds it: a PNG as the inline backend saves it, base64-encoded."""
    import base64  # noqa: PLC0415
    import io  # noqa: PLC0415

    import matplotlib.pyplot as plt  # noqa: PLC0415

    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight", dpi=fig.dpi)
    finally:
        plt.close(fig)
    return len(base64.b64encode(buf.getvalue()))


def transformers_on_cpu(build):
    """gpu-transformers with the tiny Llama on the CPU: the same engine code, small enough for CI."""
    from scripts.profiles import load_profile

    return load_profile("gpu-transformers", root=build).with_settings(
        model_source="embedded", model_dir="models/tiny-llama", device="cpu", max_model_len=512, page_size=32,
        kv_cache_space_gib=0.0625, max_num_seqs=16)


def install_model(trained, profile):
    """Copy the session's tiny Llama (conftest ``tiny_llama``) to the profile's model folder: what
    ``prepare_model`` makes there for an ``embedded`` model, without training it again."""
    import shutil  # noqa: PLC0415

    return shutil.copytree(trained, profile.path("model_dir"), dirs_exist_ok=True)


@contextlib.contextmanager
def transformers_engine_on_cpu(build, trained):
    """``TUTORIAL_BUILD_DIR`` at ``build`` (for a module's tests), the session's tiny Llama (``trained``)
    copied there and its transformers engine config written: yields the profile and the engine directory."""
    import pytest

    from scripts.engine.config import write_engine_config
    from scripts.paths import BUILD_DIR_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BUILD_DIR_ENV, str(build))
        profile = transformers_on_cpu(build)
        install_model(trained, profile)
        yield profile, write_engine_config(profile).parent


@contextlib.contextmanager
def json_http_server(answer) -> Iterator[tuple[str, list]]:
    """A loopback HTTP server whose POSTs ``answer(path, body) -> (status, dict)`` answers as JSON
    (``bytes`` instead of the dict: sent as they are, an HTML page); yields its URL and the
    ``(path, body)`` of every POST it got."""
    import json  # noqa: PLC0415
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: PLC0415

    seen: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw) if raw else {}
            seen.append((self.path, body))
            status, reply = answer(self.path, body)
            data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html" if isinstance(reply, bytes) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()
        server.server_close()
