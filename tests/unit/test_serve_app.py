import asyncio
import json
import types
from pathlib import Path

import pytest
import yaml

from scripts.engine import config as engine

from scripts.serve import app as serve_app
from scripts.capacity import check_capacity, parse_cluster
from scripts.serve.openai_api import OpenAIError, parse_sse
from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile
from scripts.triton.client import Chunk, TritonRequestError
from scripts.triton.repository.fill import RepositoryFacts

from test_openai_api import FakeTokenizer


def test_deployment_options_come_from_the_profile():
    cpu = serve_app.deployment_options(load_profile("cpu"))
    gpu = serve_app.deployment_options(load_profile("gpu-trtllm"))
    assert cpu["ray_actor_options"] == {"num_cpus": 1, "num_gpus": 0}
    assert gpu["ray_actor_options"]["num_gpus"] == 1, "GPU replicas must ask Ray for their GPU"
    assert cpu["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 32,
                                         "upscale_delay_s": 3, "downscale_delay_s": 15}
    assert cpu["max_ongoing_requests"] >= cpu["autoscaling_config"]["target_ongoing_requests"]


def test_committed_serve_configs_match_the_profiles(capsys):
    assert serve_app.main(["--check"]) == 0, capsys.readouterr().out
    config = yaml.safe_load(serve_app.config_path("cpu").read_text())
    app = config["applications"][0]
    assert app["import_path"] == "scripts.serve.app:app_builder" and app["route_prefix"] == "/"
    assert config["http_options"]["host"] == "127.0.0.1"


def test_check_notices_a_stale_config(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(serve_app, "SERVE_CONFIG_DIR", tmp_path)
    (tmp_path / "cpu.yaml").write_text("applications: []\n")
    assert serve_app.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().out


def test_serve_configs_pass_the_capacity_checker_where_they_should():
    cpu = yaml.safe_load(serve_app.config_path("cpu").read_text())
    gpu = yaml.safe_load(serve_app.config_path("gpu-trtllm").read_text())
    assert check_capacity(cpu, parse_cluster({"nodes": [{"CPU": 2}]})).ok
    assert not check_capacity(cpu, parse_cluster({"nodes": [{"CPU": 1}]})).ok  # max_replicas 2 x 1 CPU
    assert check_capacity(gpu, parse_cluster({"nodes": [{"CPU": 8, "GPU": 1}]})).ok
    assert not check_capacity(gpu, parse_cluster({"nodes": [{"CPU": 64}]})).ok  # no GPU: replicas would hang


def test_app_builder_rejects_unknown_args_and_missing_repositories(build_root):
    with pytest.raises(ValueError, match="unknown application argument"):
        serve_app.app_builder({"profle": "cpu"})
    with pytest.raises(FileNotFoundError, match="holds no filled ensemble"):
        serve_app.app_builder({"profile": "cpu"})
    with pytest.raises(AttributeError):
        serve_app.not_there  # noqa: B018


def test_app_builder_binds_the_repository(build_root):
    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    filled = serve_app.fill_serve_repository(profile)
    assert Path(filled["repository"]) == serve_app.serve_repo_dir(profile) and filled["settings"]["decoupled_mode"]
    app = serve_app.app_builder({"profile": "cpu", "mode": "managed"})
    bound = app._bound_deployment
    assert bound.init_args == (str(serve_app.serve_repo_dir(profile)), "tiny-llama", 64, "managed")
    assert bound.ray_actor_options["num_gpus"] == 0 and bound.name == "TritonLLM"


# -- the routes, on a replica object with a fake Triton ---------------------------------------

class FakeBackend:
    mode = "fake"

    def __init__(self, chunks, fail=None):
        self.chunks, self.fail, self.calls, self.is_ready = chunks, fail, [], True

    async def ready(self):
        return self.is_ready

    async def generate(self, inputs):
        self.calls.append(inputs)
        for i, chunk in enumerate(self.chunks):
            if self.fail is not None and i == self.fail:
                raise TritonRequestError("engine failed")
            yield chunk

    def info(self):
        return {"mode": self.mode, "model": "ensemble"}

    def stop(self):
        self.stopped = True


def replica(chunks, fail=None, decoupled=True):
    cls = serve_app.TritonDeployment.func_or_class.__mro__[1]  # the class under Serve's ingress wrapper
    obj = object.__new__(cls)
    obj.facts = RepositoryFacts("tok", 64, "vllm_engine", decoupled)
    obj.tokenizer, obj.vocab_size = FakeTokenizer(), 100
    obj.served_model_name, obj.default_max_tokens, obj.created = "tiny-llama", 8, 1
    obj.backend = FakeBackend(chunks, fail)
    return obj


class FakeRequest:
    def __init__(self, body):
        self._body = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def body(self):
        return self._body


def run(coro):
    return asyncio.run(coro)


def stream_events(call):
    """Call a route and read its event stream on one event loop (as Serve does: a second
    ``asyncio.run`` would find the engine's generator closed by the first one's shutdown)."""
    async def go():
        response = await call
        assert response.media_type == "text/event-stream"
        return parse_sse("".join([part async for part in response.body_iterator]).splitlines())
    return run(go())


CHUNKS = [Chunk("Triton", 1), Chunk(" loads", 1), Chunk(" the model", 2)]
USER = [{"role": "user", "content": "What does Triton do?"}]


def test_chat_completion_counts_usage_and_sends_greedy_inputs():
    r = replica(CHUNKS)
    body = run(r.chat_completions(FakeRequest({"messages": USER, "max_tokens": 10, "temperature": 0})))
    assert body["choices"][0]["message"]["content"] == "Triton loads the model"
    prompt_tokens = len(FakeTokenizer()(r.backend.calls[0]["text_input"][0, 0].decode())["input_ids"])
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 4, "total_tokens": prompt_tokens + 4}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert r.backend.calls[0]["max_tokens"][0, 0] == 10 and "temperature" not in r.backend.calls[0]


def test_finish_reason_length_and_default_max_tokens():
    r = replica([Chunk("x" * 8, 8)])
    body = run(r.completions(FakeRequest({"prompt": "Ray"})))
    assert body["choices"][0]["finish_reason"] == "length" and r.backend.calls[0]["max_tokens"][0, 0] == 8


def test_stop_sequences_are_cut_from_the_text():
    r = replica([Chunk(" the traffic, balances", 4)])
    body = run(r.completions(FakeRequest({"prompt": "Ray Serve takes", "stop": [" balances"], "max_tokens": 12})))
    assert body["choices"][0]["text"] == " the traffic," and body["choices"][0]["finish_reason"] == "stop"


def test_streaming_chat_sends_role_deltas_finish_usage_and_done():
    r = replica(CHUNKS)
    events = stream_events(r.chat_completions(FakeRequest({"messages": USER, "max_tokens": 4, "stream": True,
                                                           "stream_options": {"include_usage": True}})))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["choices"][0]["delta"]["content"] for e in events[1:4]] == ["Triton", " loads", " the model"]
    assert events[4]["choices"][0]["finish_reason"] == "length"
    assert events[5]["choices"] == [] and events[5]["usage"]["completion_tokens"] == 4
    assert events[6] == "[DONE]" and r.backend.calls[0]["stream"][0, 0]


class ByteTokenizer(FakeTokenizer):
    """Byte-level decoding: one token per UTF-8 byte, as byte-level BPE has for rare characters."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def test_streamed_text_is_decoded_from_the_ids_so_characters_stay_whole():
    # "é" is two bytes, so two tokens in two responses: postprocessing turns each into U+FFFD.
    pieces = [("Caf", [67, 97, 102]), ("\ufffd", [0xC3]), ("\ufffd", [0xA9]), (" ok", [32, 111, 107])]
    r = replica([Chunk(text, len(ids), ids) for text, ids in pieces])
    r.tokenizer = ByteTokenizer()
    events = stream_events(r.completions(FakeRequest({"prompt": "p", "max_tokens": 8, "stream": True, "stop": [" o"]})))
    deltas = [e["choices"][0]["text"] for e in events[:-2]]
    assert "".join(deltas) == "Café" and "é" in deltas and events[-2]["choices"][0]["finish_reason"] == "stop"


def test_a_repository_that_is_not_decoupled_streams_in_one_piece():
    r = replica([Chunk("Triton loads", 2)], decoupled=False)
    events = stream_events(r.completions(FakeRequest({"prompt": "p", "max_tokens": 4, "stream": True})))
    assert not r.backend.calls[0]["stream"][0, 0]  # a plain model refuses stream=true
    assert events[0]["choices"][0]["text"] == "Triton loads" and events[-1] == "[DONE]"


def test_triton_errors_become_500_before_the_stream_and_an_error_event_during_it():
    with pytest.raises(OpenAIError) as info:
        run(replica(CHUNKS, fail=0).chat_completions(FakeRequest({"messages": USER, "stream": True})))
    assert info.value.status == 500 and "engine failed" in info.value.message
    with pytest.raises(OpenAIError):
        run(replica(CHUNKS, fail=1).chat_completions(FakeRequest({"messages": USER})))
    events = stream_events(replica(CHUNKS, fail=2).chat_completions(FakeRequest({"messages": USER, "stream": True})))
    assert "engine failed" in events[-2]["error"]["message"] and events[-1] == "[DONE]"


def test_requests_too_long_for_the_model_are_refused_before_triton():
    r = replica(CHUNKS)
    with pytest.raises(OpenAIError) as info:
        run(r.completions(FakeRequest({"prompt": "x" * 60, "max_tokens": 10})))
    assert info.value.code == "context_length_exceeded" and not r.backend.calls


def test_generate_route_and_its_errors():
    r = replica(CHUNKS)
    assert run(r.generate(query="Ray", max_tokens=4)) == {"text": "Triton loads the model",
                                                          "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}}
    for query, max_tokens in ((" ", 4), ("Ray", 0)):
        with pytest.raises(OpenAIError):
            run(r.generate(query=query, max_tokens=max_tokens))


def test_health_follows_triton_readiness():
    r = replica(CHUNKS)
    run(r.check_health())
    assert run(r.health()).status_code == 200
    r.backend.is_ready = False
    with pytest.raises(RuntimeError, match="not ready"):
        run(r.check_health())
    assert run(r.health()).status_code == 503


def test_models_route_and_error_handlers():
    assert run(replica(CHUNKS).models())["data"][0]["id"] == "tiny-llama"
    response = run(serve_app._openai_error(None, OpenAIError(404, "no such model", param="model", code="model_not_found")))
    assert response.status_code == 404 and json.loads(response.body)["error"]["code"] == "model_not_found"
    exc = types.SimpleNamespace(errors=lambda: [{"type": "missing", "loc": ("query", "query"), "msg": "Field required"}])
    response = run(serve_app._query_error(None, exc))
    assert response.status_code == 400 and json.loads(response.body)["error"]["message"] == "'query' is required"


def test_serve_config_dir_is_in_the_repository():
    assert serve_app.SERVE_CONFIG_DIR == REPO_ROOT / "env" / "serve"
