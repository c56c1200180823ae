"""The Serve layer: the routes over HTTP (FastAPI's TestClient, a fake Triton behind the service),
the replica's hooks and the application builder. No Ray cluster is started."""
import asyncio
import json
import os
import types
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from scripts.engine import config as engine
from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile
from scripts.serve import app as serve_app
from scripts.serve.openai_api import parse_sse
from scripts.triton.client import TritonUnavailable

from fakes import CHUNKS_TEXT, FakeBackend, FakeTokenizer, fake_service, routes_answered_by

USER = [{"role": "user", "content": "What does Triton do?"}]


@pytest.fixture
def service():
    return fake_service()


@pytest.fixture
def client(service):
    with routes_answered_by(service) as app, TestClient(app) as http:
        yield http


def openai_error(response, status):
    assert response.status_code == status and response.headers["content-type"] == "application/json", response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# -- routes ------------------------------------------------------------------------------------

def test_health_route_follows_triton(client, service):
    ok = client.get("/health")
    assert (ok.status_code, ok.json()) == (200, {"status": "ok"})
    service.backend.is_ready = False
    loading = client.get("/health")
    assert (loading.status_code, loading.json()) == (503, {"status": "loading"})


def test_models_route(client):
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny-llama"]


def test_generate_route_and_its_query_errors(client, service):
    r = client.get("/generate", params={"query": "Ray", "max_tokens": 4})
    assert r.status_code == 200 and r.json()["text"] == CHUNKS_TEXT and r.json()["usage"]["completion_tokens"] == 4
    assert service.backend.calls[-1]["max_tokens"][0, 0] == 4
    # Without max_tokens the route asks for its default of 64: more than a 64-token model has room for.
    default = openai_error(client.get("/generate", params={"query": "Ray"}), 400)
    assert default["param"] == "max_tokens" and "is 64" in default["message"] and "at most 60" in default["message"]
    missing = openai_error(client.get("/generate"), 400)
    assert (missing["message"], missing["param"]) == ("'query' is required", "query")
    wrong = openai_error(client.get("/generate", params={"query": "Ray", "max_tokens": "many"}), 400)
    assert wrong["param"] == "max_tokens" and wrong["message"].startswith("'max_tokens': Input should be a valid integer")
    assert not wrong["message"].endswith(".")
    assert openai_error(client.get("/generate", params={"query": " "}), 400)["param"] == "query"


def test_chat_route_answers_whole_or_streamed(client):
    plain = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 10, "temperature": 0})
    assert plain.status_code == 200 and plain.headers["content-type"] == "application/json"
    assert plain.json()["choices"][0]["message"]["content"] == CHUNKS_TEXT
    streamed = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 10, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(streamed.text.splitlines())
    assert events[-1] == "[DONE]" and events[0]["object"] == "chat.completion.chunk"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == CHUNKS_TEXT


def test_completions_route_answers_whole_or_streamed(client):
    plain = client.post("/v1/completions", json={"prompt": "Ray Serve takes", "max_tokens": 4})
    assert plain.json()["object"] == "text_completion" and plain.json()["choices"][0]["text"] == CHUNKS_TEXT
    events = parse_sse(client.post("/v1/completions", json={"prompt": "Ray", "stream": True}).text.splitlines())
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == CHUNKS_TEXT


def test_bad_requests_get_openai_errors_and_leave_the_app_working(client):
    broken = openai_error(client.post("/v1/chat/completions", content=b'{"messages": ['), 400)
    assert broken["message"].startswith("the request body is not valid JSON") and broken["type"] == "invalid_request_error"
    unknown = openai_error(client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": USER}), 404)
    assert unknown["code"] == "model_not_found" and unknown["param"] == "model"
    too_long = openai_error(client.post("/v1/completions", json={"prompt": "x" * 70}), 400)
    assert too_long["code"] == "context_length_exceeded"
    assert client.post("/v1/chat/completions", json={"messages": USER}).status_code == 200


@pytest.mark.parametrize("route, request_body", [("/v1/chat/completions", {"messages": USER, "stream": True}),
                                                  ("/v1/completions", {"prompt": "Ray"})])
def test_a_request_triton_refuses_is_a_500_even_when_streamed(route, request_body):
    with routes_answered_by(fake_service(fail=0)) as app, TestClient(app) as http:
        error = openai_error(http.post(route, json=request_body), 500)
    assert error["type"] == "server_error" and error["message"] == "Triton could not serve the request: engine failed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_when_no_triton_answers_is_a_503_that_says_to_retry(stream):
    service = fake_service(fail=0)
    service.backend.error = TritonUnavailable("no Triton answers at 127.0.0.1:1 (Connection refused)")
    with routes_answered_by(service) as app, TestClient(app) as http:
        error = openai_error(http.post("/v1/chat/completions", json={"messages": USER, "stream": stream}), 503)
    assert error["code"] == "triton_unavailable" and error["message"].startswith("Triton is unavailable, retry shortly")


def test_a_failure_during_the_stream_ends_it_with_an_error_event():
    with routes_answered_by(fake_service(fail=2)) as app, TestClient(app) as http:
        r = http.post("/v1/chat/completions", json={"messages": USER, "stream": True})
    events = parse_sse(r.text.splitlines())
    assert r.status_code == 200 and events[-2]["error"]["type"] == "server_error" and events[-1] == "[DONE]"


def test_routes_use_the_service_of_the_replica_serve_runs(monkeypatch, service):
    replica = types.SimpleNamespace(service=service)
    monkeypatch.setattr(serve_app.serve, "get_replica_context", lambda: types.SimpleNamespace(servable_object=replica))
    assert asyncio.run(serve_app.replica_service()) is service


# -- the bearer token and the body -------------------------------------------------------------

KEY = "s3cret"
GUARDED = [("get", "/v1/models", {}), ("get", "/generate", {"params": {"query": "Ray", "max_tokens": 4}}),
           ("post", "/v1/chat/completions", {"json": {"messages": USER, "max_tokens": 10}}),
           ("post", "/v1/completions", {"json": {"prompt": "Ray", "max_tokens": 4}})]


@pytest.mark.parametrize("method, route, sent", GUARDED, ids=[route for _, route, _ in GUARDED])
def test_a_replica_with_a_key_asks_every_route_for_it(client, service, method, route, sent):
    service.api_key = KEY
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
        error = openai_error(getattr(client, method)(route, headers=headers, **sent), 401)
        assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error", headers
        assert "Authorization: Bearer <key>" in error["message"] and serve_app.API_KEY_ENV in error["message"]
    assert not service.backend.calls  # refused before Triton
    for scheme in ("Bearer", "bearer"):
        ok = getattr(client, method)(route, headers={"Authorization": f"{scheme} {KEY}"}, **sent)
        assert ok.status_code == 200, ok.text


def test_health_needs_no_key_and_no_key_means_no_check(client, service):
    service.api_key = KEY
    assert client.get("/health").status_code == 200
    service.api_key = None
    for _, route, sent in GUARDED:
        method = "get" if route in ("/v1/models", "/generate") else "post"
        assert getattr(client, method)(route, **sent).status_code == 200, route


def test_a_replica_takes_its_key_from_the_environment(serve_repo, started, monkeypatch):
    monkeypatch.setenv(serve_app.API_KEY_ENV, KEY)
    assert serve_app.TritonReplica(str(serve_repo), "tiny-llama").service.api_key == KEY
    monkeypatch.setenv(serve_app.API_KEY_ENV, "")  # set but empty: no key, as unset
    assert serve_app.TritonReplica(str(serve_repo), "tiny-llama").service.api_key is None
    monkeypatch.delenv(serve_app.API_KEY_ENV)
    assert serve_app.TritonReplica(str(serve_repo), "tiny-llama").service.api_key is None


@pytest.mark.parametrize("sent", [{"content": json.dumps({"prompt": "Ray"}), "headers": {"Content-Type": "text/plain"}},
                                  {"data": {"prompt": "Ray"}}], ids=["text/plain", "form data"])
def test_a_body_that_is_not_json_is_a_415(client, service, sent):
    error = openai_error(client.post("/v1/completions", **sent), 415)
    assert "Content-Type: application/json" in error["message"] and not service.backend.calls


@pytest.mark.parametrize("headers", [{"Content-Type": "application/json; charset=utf-8"}, {}],
                         ids=["with a charset", "without a content type"])
def test_json_is_accepted_with_a_charset_or_without_a_content_type(client, headers):
    r = client.post("/v1/completions", content=json.dumps({"prompt": "Ray"}).encode(), headers=headers)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == CHUNKS_TEXT, r.text


def test_a_body_beyond_the_limit_is_a_413_declared_or_chunked(client, service):
    service.max_body_bytes = 200
    big = json.dumps({"prompt": "x" * 300}).encode()
    declared = openai_error(client.post("/v1/completions", content=big, headers={"Content-Type": "application/json"}), 413)
    assert "larger than this server's limit of 200 bytes" in declared["message"]

    def pieces():  # no Content-Length: the body arrives chunked and is counted as it is read
        for start in range(0, len(big), 64):
            yield big[start:start + 64]

    chunked = client.post("/v1/completions", content=pieces(), headers={"Content-Type": "application/json"})
    assert openai_error(chunked, 413)["message"] == declared["message"] and not service.backend.calls
    small = json.dumps({"prompt": "Ray"}).encode()
    assert client.post("/v1/completions", content=iter([small[:5], small[5:]])).status_code == 200


# -- the replica -------------------------------------------------------------------------------

@pytest.fixture
def serve_repo(build_root):
    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    serve_app.fill_serve_repository(profile)
    return serve_app.serve_repo_dir(profile)


@pytest.fixture
def started(monkeypatch):
    """What the replica starts, recorded: the tokenizer it loads and the Triton it launches."""
    calls = {}

    def make_backend(repo, model_name, mode, ready_timeout_s, triton_url=None):
        calls["backend"] = (Path(repo), model_name, mode, ready_timeout_s)
        calls["triton_url"] = triton_url
        calls["backend_object"] = FakeBackend()
        return calls["backend_object"]

    def load_tokenizer(tokenizer_dir):
        calls["tokenizer_dir"] = tokenizer_dir
        return FakeTokenizer()

    monkeypatch.setattr(serve_app, "make_backend", make_backend)
    monkeypatch.setattr(serve_app, "load_tokenizer", load_tokenizer)
    return calls


def test_a_replica_starts_triton_on_the_repository_and_serves_from_it(serve_repo, started):
    replica = serve_app.TritonReplica(str(serve_repo), "tiny-llama", 16, mode="managed")
    assert started["backend"] == (serve_repo, "ensemble", "managed", 600)
    assert started["tokenizer_dir"] == replica.service.facts.tokenizer_dir and replica.service.facts.decoupled
    assert replica.service.backend is started["backend_object"]
    assert replica.service.served_model_name == "tiny-llama" and replica.service.default_max_tokens == 16


def test_a_replica_can_call_the_engine_model_itself(serve_repo, started):
    """triton_model="engine": Triton loads the decoupled engine model alone, the replica sends token
    ids (its own tokenization) and decodes the ids that come back."""
    from fakes import ByteTokenizer
    from scripts.triton.client import Chunk

    replica = serve_app.TritonReplica(str(serve_repo), "tiny-llama", 16, mode="managed", triton_model="engine")
    engine = replica.service.facts.engine_model
    assert started["backend"] == (serve_repo, engine, "managed", 600) and replica.service.engine.model_name == engine
    service = replica.service
    service.tokenizer = ByteTokenizer()
    service.backend = FakeBackend([Chunk("", 2, list("Tr".encode())), Chunk("", 3, list("iton".encode())[:3]),
                                   Chunk("", 1, [ord("n")])])
    body = json.dumps({"prompt": "Ray", "max_tokens": 6, "stop": ["on"], "temperature": 0.5, "seed": 3,
                       "ignore_eos": True}).encode()
    answer = asyncio.run(service.completions(body))
    assert answer["choices"][0]["text"] == "Trit" and answer["usage"]["completion_tokens"] == 6
    sent = service.backend.calls[-1]
    assert sent["input_ids"].tolist() == [[0, *map(ord, "Ray")]] and sent["request_output_len"].tolist() == [[6]]
    assert sent["streaming"].tolist() == [[True]] and sent["end_id"].tolist() == [[-1]]  # ignore_eos
    assert sent["temperature"].tolist() == [[0.5]] and sent["random_seed"].tolist() == [[3]]
    assert sent["stop_words_list"].tolist() == [[[ord("o"), ord("n")], [2, -1]]]
    streamed = json.dumps({"prompt": "Ray", "max_tokens": 6, "stream_interval": 4}).encode()
    asyncio.run(service.completions(streamed))
    assert service.backend.parameters[-2:] == [None, {"stream_interval": 4}]  # a Triton request parameter
    with pytest.raises(ValueError, match="triton_model must be one of"):
        serve_app.TritonReplica(str(serve_repo), "tiny-llama", triton_model="vllm_model")


@pytest.mark.parametrize("triton_model", ["ensemble", "engine"])
def test_a_prompt_longer_than_a_tensorrt_llm_engines_max_input_len_gets_a_400_naming_it(build_root, started,
                                                                                        triton_model):
    """A TensorRT-LLM engine takes prompts of at most max_input_len tokens (trtllm-build); its executor
    throws on a longer one and Triton answers 500. The replica refuses it first, in both modes."""
    profile = load_profile("gpu-trtllm")
    engine.write_engine_config(profile)
    serve_app.fill_serve_repository(profile)
    replica = serve_app.TritonReplica(str(serve_app.serve_repo_dir(profile)), "llama", 16, mode="managed",
                                      triton_model=triton_model)
    limit = profile["max_input_len"]
    assert replica.service.facts.max_input_len == limit < replica.service.facts.max_model_len
    with routes_answered_by(replica.service) as app, TestClient(app) as http:
        too_long = http.post("/v1/completions", json={"prompt": "x" * limit, "max_tokens": 8})  # BOS + limit tokens
        error = openai_error(too_long, 400)
        assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
        assert f"the prompt has {limit + 1} tokens, more than the engine's max_input_len of {limit}" in error["message"]
        assert not replica.service.backend.calls
        fits = http.post("/v1/completions", json={"prompt": "x" * (limit - 1), "max_tokens": 8})
        assert fits.status_code == 200 and len(replica.service.backend.calls) == 1


def test_a_replica_attaches_to_a_shared_triton(serve_repo, started):
    serve_app.TritonReplica(str(serve_repo), "tiny-llama", mode="attached", triton_url="127.0.0.1:8001")
    assert started["backend"][2] == "attached" and started["triton_url"] == "127.0.0.1:8001"


def test_replica_hooks(serve_repo, started, monkeypatch):
    replica = serve_app.TritonReplica(str(serve_repo), "tiny-llama")
    asyncio.run(replica.check_health())
    started["backend_object"].is_ready = False
    with pytest.raises(RuntimeError, match="not ready"):
        asyncio.run(replica.check_health())
    context = types.SimpleNamespace(replica_id=types.SimpleNamespace(unique_id="r1"))
    monkeypatch.setattr(serve_app.serve, "get_replica_context", lambda: context)
    info = replica.triton_info()
    assert info["replica"] == "r1" and info["replica_pid"] == os.getpid() and info["decoupled"]
    replica.__del__()  # what Serve calls when it stops the replica
    del replica
    assert started["backend_object"].stops == 1


def test_a_replica_whose_tokenizer_fails_starts_no_triton(serve_repo, started, monkeypatch):
    monkeypatch.setattr(serve_app, "load_tokenizer", lambda _dir: (_ for _ in ()).throw(OSError("no tokenizer")))
    with pytest.raises(OSError):
        serve_app.TritonReplica(str(serve_repo), "tiny-llama")
    assert "backend" not in started


# -- the application ---------------------------------------------------------------------------

def test_app_builder_rejects_unknown_args_and_missing_repositories(build_root):
    with pytest.raises(ValueError, match="unknown application argument"):
        serve_app.app_builder({"profle": "cpu"})
    with pytest.raises(FileNotFoundError, match="holds no filled ensemble"):
        serve_app.app_builder({"profile": "cpu"})
    with pytest.raises(FileNotFoundError, match="holds no filled ensemble"):
        serve_app.app  # noqa: B018 - `serve run scripts.serve.app:app` builds it on access
    with pytest.raises(AttributeError):
        serve_app.not_there  # noqa: B018


def test_app_builder_binds_the_repository(serve_repo):
    profile = load_profile("cpu")
    bound = serve_app.app_builder({"profile": "cpu", "mode": "managed"})._bound_deployment
    assert bound.init_args == (str(serve_repo), profile["served_model_name"], profile["serve_default_max_tokens"], "managed",
                               profile["serve_triton_model"])
    assert bound.init_kwargs == {"triton_url": None}
    assert bound.ray_actor_options["num_gpus"] == 0 and bound.name == serve_app.DEPLOYMENT_NAME
    named = serve_app.app_builder({"served_model_name": "other"})._bound_deployment
    assert named.init_args[1:] == ("other", profile["serve_default_max_tokens"], "auto", profile["serve_triton_model"])
    shared = serve_app.app_builder({"triton_url": "127.0.0.1:8001", "triton_model": "engine"})._bound_deployment
    assert shared.init_args[3:] == ("attached", "engine") and shared.init_kwargs == {"triton_url": "127.0.0.1:8001"}
    fixed = serve_app.app_builder({"num_replicas": 3})._bound_deployment
    assert fixed._deployment_config.num_replicas == 3 and fixed._deployment_config.autoscaling_config is None
    assert serve_app.app._bound_deployment.init_args == named.init_args[:1] + (profile["served_model_name"],) + named.init_args[2:]


def test_a_relative_repository_is_relative_to_the_repository_root(serve_repo):
    relative = os.path.relpath(serve_repo, REPO_ROOT)
    bound = serve_app.app_builder({"model_repository": relative})._bound_deployment
    assert bound.init_args[0] == str(serve_repo)


def test_a_replica_attached_to_a_shared_triton_asks_for_no_gpu():
    gpu = load_profile("gpu-vllm")
    assert gpu["num_gpus_per_replica"] == 1
    own = serve_app.replica_options(gpu)
    assert own["ray_actor_options"]["num_gpus"] == 1 and "autoscaling_config" in own  # it runs Triton and the engine
    attached = serve_app.replica_options(gpu, attached=True, num_replicas=2)
    assert attached["ray_actor_options"] == {"num_cpus": gpu["serve_num_cpus_per_replica"], "num_gpus": 0}
    assert attached["num_replicas"] == 2 and "autoscaling_config" not in attached
    assert serve_app.replica_options(gpu)["ray_actor_options"]["num_gpus"] == 1  # the profile's options are left as they were


def test_a_share_of_one_gpu_and_another_max_replicas():
    gpu = load_profile("gpu-vllm")
    shared = serve_app.replica_options(gpu, num_gpus=0.5, max_replicas=2)
    assert shared["ray_actor_options"]["num_gpus"] == 0.5 and shared["autoscaling_config"]["max_replicas"] == 2
    assert serve_app.deployment_options(gpu)["autoscaling_config"]["max_replicas"] == gpu["serve_max_replicas"]
    with pytest.raises(ValueError, match=r"share of one GPU in \(0, 1\]"):
        serve_app.replica_options(gpu, num_gpus=0)
    with pytest.raises(ValueError, match="below the profile's min_replicas"):
        serve_app.replica_options(gpu, max_replicas=0)
    with pytest.raises(ValueError, match="ask for no GPU"):
        serve_app.replica_options(load_profile("cpu"), num_gpus=0.5)
