"""Bad input, across the Serve application's routes and Triton's generate endpoints, on a real
stack (conftest.py): each case gets a 4xx whose message names the problem, and a good request right
after it succeeds. A client that goes away mid-stream gets its engine request cancelled."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from scripts.model.tokenizer import load_tokenizer
from scripts.serve.service import LLMService, max_body_bytes
from scripts.triton.client import AttachedTriton
from scripts.triton.repository.fill import repository_facts

from fakes import serving

USER = [{"role": "user", "content": "What does Triton do?"}]
TEN_MB = 10 * 1024 * 1024
LONG = "hello " * 2000  # about 2,000 tokens: beyond the cpu model's 512


@pytest.fixture(scope="module")
def stack(owned_triton):
    """The Serve routes (FastAPI + uvicorn, as a replica runs them) over the owned Triton's ensemble."""
    facts = repository_facts(owned_triton.repo)
    service = LLMService(AttachedTriton(owned_triton.info["grpc_url"], owned_triton.repo), facts,
                         load_tokenizer(facts.tokenizer_dir), "tiny-llama", 16)
    with serving(service) as base:
        try:  # the stack serves before any case is judged; if not, one error that says why, not 50 failures
            good_serve_request(base)
        except (AssertionError, requests.RequestException) as exc:
            pytest.fail(f"the stack does not serve a good request ({exc}); {owned_triton.state()}")
        yield base, owned_triton


def body(value) -> dict:
    return {"json": value} if not isinstance(value, bytes) else {"data": value, "headers": {"Content-Type": "application/json"}}


# route, what is sent, the status, words the message must hold
SERVE_CASES = {
    "invalid JSON": ("/v1/chat/completions", body(b'{"messages": ['), 400, "not valid JSON"),
    "wrong content type": ("/v1/chat/completions", {"data": json.dumps({"messages": USER}),
                                                    "headers": {"Content-Type": "text/plain"}}, 415, "application/json"),
    "form data (curl -d)": ("/v1/completions", {"data": {"prompt": "hi"}}, 415, "Content-Type: application/json"),
    "empty body": ("/v1/chat/completions", body(b""), 400, "body is empty"),
    "not an object": ("/v1/chat/completions", body([1, 2]), 400, "must be a JSON object"),
    "missing messages": ("/v1/chat/completions", body({"max_tokens": 8}), 400, "'messages' is required"),
    "empty messages": ("/v1/chat/completions", body({"messages": []}), 400, "'messages'"),
    "messages not a list": ("/v1/chat/completions", body({"messages": "hi"}), 400, "'messages'"),
    "empty content": ("/v1/chat/completions", body({"messages": [{"role": "user", "content": " "}]}), 400, "is empty"),
    "unknown role": ("/v1/chat/completions", body({"messages": [{"role": "wizard", "content": "hi"}]}), 400,
                     "'messages[0].role'"),
    "max_tokens 0": ("/v1/chat/completions", body({"messages": USER, "max_tokens": 0}), 400, "at least 1"),
    "max_tokens negative": ("/v1/completions", body({"prompt": "hi", "max_tokens": -5}), 400, "at least 1"),
    "max_tokens a string": ("/v1/completions", body({"prompt": "hi", "max_tokens": "ten"}), 400, "'max_tokens'"),
    "max_tokens above the limit": ("/v1/completions", body({"prompt": "hi", "max_tokens": 100000}), 400, "model's limit"),
    "temperature a string": ("/v1/completions", body({"prompt": "hi", "temperature": "hot"}), 400, "'temperature'"),
    "prompt beyond the context": ("/v1/completions", body({"prompt": LONG, "max_tokens": 4}), 400, "shorten it"),
    "chat beyond the context": ("/v1/chat/completions", body({"messages": [{"role": "user", "content": LONG}]}), 400,
                                "shorten it"),
    "missing prompt": ("/v1/completions", body({"max_tokens": 4}), 400, "'prompt' is required"),
    "empty prompt": ("/v1/completions", body({"prompt": ""}), 400, "'prompt' is empty"),
    "unknown model": ("/v1/chat/completions", body({"model": "gpt-4o", "messages": USER}), 404, "does not exist"),
    "not UTF-8": ("/v1/completions", body(b'{"prompt": "\xff\xfe"}'), 400, "not valid UTF-8"),
    "10 MB body": ("/v1/completions", body({"prompt": "x" * TEN_MB}), 413, "larger than this server's limit"),
}


def good_serve_request(base: str) -> None:
    r = requests.post(f"{base}/v1/chat/completions", json={"messages": USER, "max_tokens": 4, "temperature": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1, r.text


@pytest.mark.parametrize("case", list(SERVE_CASES))
def test_serve_routes_answer_bad_input_with_a_clear_4xx(stack, case):
    base, _ = stack
    route, sent, status, words = SERVE_CASES[case]
    start = time.monotonic()
    r = requests.post(f"{base}{route}", timeout=60, **sent)
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert words in error["message"], error
    assert set(error) == {"message", "type", "param", "code"}
    assert time.monotonic() - start < 10, "refused, but slowly"
    good_serve_request(base)


@pytest.mark.parametrize("params, words", [({}, "'query' is required"), ({"query": "hi", "max_tokens": 0}, "at least 1"),
                                           ({"query": "hi", "max_tokens": "many"}, "'max_tokens'"),
                                           ({"query": " "}, "'query' is empty")])
def test_generate_route_answers_bad_queries_with_a_400(stack, params, words):
    base, _ = stack
    r = requests.get(f"{base}/generate", params=params, timeout=60)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
    good_serve_request(base)


def test_a_long_prompt_is_refused_before_it_is_tokenized(stack):
    """A prompt of almost the body limit (about 1 MB) is refused at once: tokenizing it would hold
    the replica's event loop, and every request on it, for seconds."""
    base, _ = stack
    size = max_body_bytes(512) - 100
    start = time.monotonic()
    r = requests.post(f"{base}/v1/completions", json={"prompt": "x" * size}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]
    assert time.monotonic() - start < 2


# Triton's generate endpoints: what reaches this repository's models is checked there (INVALID_ARG,
# HTTP 400). A body Triton's HTTP frontend cannot parse never reaches a model: Triton answers it
# with HTTP 500 and its parser's message (its JSON errors are TRITONSERVER_ERROR_INTERNAL), which a
# client of the Serve routes never sees.
TRITON_CASES = {
    "missing text_input": ({"max_tokens": 4}, 400, "missing required input(s) ['text_input']"),
    "empty text_input": ({"text_input": " ", "max_tokens": 4}, 400, "text_input is empty"),
    "max_tokens 0": ({"text_input": "hi", "max_tokens": 0}, 400, "max_tokens must be a positive number"),
    "max_tokens negative": ({"text_input": "hi", "max_tokens": -1}, 400, "max_tokens must be a positive number"),
    "max_tokens above the limit": ({"text_input": "hi", "max_tokens": 100000}, 400, "model's limit of 512"),
    "prompt beyond the context": ({"text_input": LONG, "max_tokens": 4}, 400, "model's limit of 512"),
    "not UTF-8": (b'{"text_input": "\xff\xfe", "max_tokens": 4}', 400, "not valid UTF-8"),
    "10 MB prompt": ({"text_input": "x" * TEN_MB, "max_tokens": 4}, 400, "shorten the prompt"),
    "invalid JSON": (b'{"text_input": ', 500, "failed to parse the request JSON"),
    "empty body": (b"", 500, "The document is empty"),
    "max_tokens a string": ({"text_input": "hi", "max_tokens": "ten"}, 500, "Unable to parse 'data'"),
}


def good_triton_request(url: str) -> None:
    r = requests.post(f"{url}/v2/models/ensemble/generate", json={"text_input": "Ray Serve takes", "max_tokens": 4}, timeout=60)
    assert r.status_code == 200 and r.json()["text_output"], r.text


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
@pytest.mark.parametrize("case", list(TRITON_CASES))
def test_triton_generate_endpoints_name_the_problem(stack, case, endpoint):
    _, triton = stack
    sent, status, words = TRITON_CASES[case]
    start = time.monotonic()
    r = requests.post(f"{triton.http_url}/v2/models/ensemble/{endpoint}", timeout=60, **body(sent))
    assert r.status_code == status and words in r.text, r.text[:300]
    assert time.monotonic() - start < 10, "refused, but slowly"
    good_triton_request(triton.http_url)


def test_triton_answers_an_unknown_model_with_a_404(stack):
    _, triton = stack
    r = requests.post(f"{triton.http_url}/v2/models/nosuch/generate", json={"text_input": "hi"}, timeout=10)
    assert r.status_code == 404 and "'nosuch' is not found" in r.text


def metric(metrics_url: str, name: str, **labels: str) -> float:
    """The sum of a metric's series on Triton's metrics port whose labels include ``labels`` (the
    parser names a counter's family without ``_total`` and gives its samples that suffix)."""
    from prometheus_client.parser import text_string_to_metric_families

    families = text_string_to_metric_families(requests.get(metrics_url, timeout=10).text)
    return sum(sample.value for family in families if family.name == name.removesuffix("_total")
               for sample in family.samples if labels.items() <= sample.labels.items())


RUNNING, CANCELLED = "tutorial_engine_requests_running", "tutorial_engine_requests_cancelled_total"
FAILED = "nv_inference_request_failure"


def leave_after_the_first_event(base: str) -> bool:
    """Stream a long completion, read its first event, close the connection; True if it streamed.
    ``ignore_eos``: the cpu model's greedy answer to this prompt ends at its 34th token, and on a busy
    machine a request that short could finish before its client's leaving reached Triton (seen once: 15
    of 16 cancelled); 480 tokens cannot."""
    with requests.post(f"{base}/v1/completions", stream=True, timeout=60,
                       json={"prompt": "Ray Serve takes", "max_tokens": 480, "temperature": 0, "stream": True,
                             "ignore_eos": True}) as r:
        return r.status_code == 200 and next(line for line in r.iter_lines() if line).startswith(b"data: ")


def test_clients_that_leave_mid_stream_have_their_triton_requests_cancelled(stack):
    """A closed connection stops the route, which cancels its gRPC stream, and Triton cancels the
    ensemble request. Triton 2.51 cancels only the ensemble's step in flight (``postprocessing``):
    the engine model is not told and writes up to max_tokens before it frees the request's KV cache
    (the next test shows the engine's own cancellation, reached when the engine model is called
    directly)."""
    base, triton = stack
    url = triton.info["metrics_url"]
    before = {"ensemble": metric(url, FAILED, model="ensemble"), "engine": metric(url, CANCELLED)}
    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(leave_after_the_first_event, [base] * 16))
    deadline = time.monotonic() + 15
    while (metric(url, RUNNING) or metric(url, FAILED, model="ensemble") < before["ensemble"] + 16) and time.monotonic() < deadline:
        time.sleep(0.2)
    cancelled = {"ensemble": metric(url, FAILED, model="ensemble") - before["ensemble"],
                 "engine": metric(url, CANCELLED) - before["engine"]}
    print(f"of 16 streams left early, Triton cancelled {cancelled['ensemble']:.0f} ensemble requests; "
          f"the engine aborted {cancelled['engine']:.0f}")
    assert cancelled["ensemble"] == 16 and metric(url, RUNNING) == 0
    good_serve_request(base)


def test_a_cancelled_stream_of_the_engine_model_is_aborted_in_the_engine(stack):
    """The decoupled engine model called directly over gRPC: each cancelled stream is aborted in vLLM
    (its KV cache freed at once), as the engine's counter shows."""
    import asyncio

    from scripts.triton.client import GrpcModel
    from scripts.triton.engine_request import engine_model_request

    _, triton = stack
    url = triton.info["metrics_url"]
    before = metric(url, CANCELLED)
    request = engine_model_request(triton.repo, [1, 265, 611], 480, streaming=True, ignore_eos=True)  # none ends first
    engine = GrpcModel(triton.info["grpc_url"], request.model_name, request.outputs)
    inputs = request.inputs

    async def leave_early():
        chunks = engine.generate(inputs)
        await anext(chunks)
        await chunks.aclose()  # GrpcModel cancels the stream of a request it did not read to the end

    async def all_of_them():
        await asyncio.gather(*(leave_early() for _ in range(16)))
        await engine.close()

    asyncio.run(all_of_them())
    deadline = time.monotonic() + 15
    while metric(url, RUNNING) and time.monotonic() < deadline:
        time.sleep(0.2)
    aborted = metric(url, CANCELLED) - before
    print(f"of 16 engine streams left early, the engine aborted {aborted:.0f}")
    assert aborted == 16 and metric(url, RUNNING) == 0
    # vLLM's scheduler stats, copied to Triton's metrics port each engine step
    exported = requests.get(url, timeout=10).text
    assert "tutorial_engine_kv_cache_usage{" in exported and "tutorial_engine_requests_waiting{" in exported
    assert 0 <= metric(url, "tutorial_engine_kv_cache_usage") <= 1 and metric(url, "tutorial_engine_requests_waiting") == 0
