"""scripts.bench.triton_stream: Triton's generate_stream under load, against a real loopback HTTP
server that speaks its SSE format (no Triton, no vLLM: ``bench`` itself, which needs vLLM's
dataset code, is not run here)."""
from __future__ import annotations

import asyncio
import json
import socket

import pytest

from fakes import in_a_thread
from scripts.bench import triton_stream as ts
from scripts.bench.sweep import Target, plan
from scripts.bench.vllm_bench import RESULT_KEYS, normalize

STOP_AT = 6  # the fake model stops after this many tokens, whatever max_tokens says
CHUNK = 2  # tokens per streamed response
DELAY_S = 0.01  # before each response


class FakeTriton:
    """``POST /v2/models/{model}/generate_stream``: ``ensemble`` streams its tokens two at a time with
    ``sequence_length`` (the first as a one-element array), ``vllm_model`` the same text without it,
    both then an empty final response; ``broken`` sends one response and then an ``error`` event;
    ``bad`` answers HTTP 400. Records the bodies and the peak of requests in flight."""

    def __init__(self):
        self.bodies: list[tuple[str, dict]] = []
        self.in_flight = self.peak = 0

    def app(self):
        from starlette.applications import Starlette  # noqa: PLC0415
        from starlette.responses import JSONResponse, StreamingResponse  # noqa: PLC0415
        from starlette.routing import Route  # noqa: PLC0415

        async def generate_stream(request):
            model = request.path_params["model"]
            body = await request.json()
            self.bodies.append((model, body))
            if model == "bad":
                return JSONResponse({"error": "unexpected inference input 'max_token'"}, status_code=400)
            wanted = body["max_tokens"] if "max_tokens" in body else json.loads(body["sampling_parameters"])["max_tokens"]
            total = min(wanted, STOP_AT)

            def data(event):
                return f"data: {json.dumps({'model_name': model, 'model_version': '1'} | event)}\n\n"

            async def events():
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                try:
                    yield ": a comment line, skipped\n\n"
                    sent = 0
                    while sent < total:
                        await asyncio.sleep(DELAY_S)
                        if model == "broken" and sent:
                            yield data({"error": "engine failed: out of KV cache"})
                            return
                        n = min(CHUNK, total - sent)
                        event = {"text_output": "x" * n}
                        if model == "ensemble":
                            event["sequence_length"] = [n] if not sent else n
                        yield data(event)
                        sent += n
                    yield data({"text_output": ""})  # the final, empty response
                finally:
                    self.in_flight -= 1

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v2/models/{model}/generate_stream", generate_stream, methods=["POST"])])


@pytest.fixture(scope="module")
def triton():
    """The fake Triton on a free loopback port, from a thread (as ``fakes.serving`` runs the routes)."""
    fake = FakeTriton()
    with in_a_thread(fake.app(), "fake-triton") as url:
        fake.url = url + "/"
        yield fake


@pytest.fixture
def fake(triton):
    triton.bodies.clear()
    triton.in_flight = triton.peak = 0
    return triton


def load(url, kind, n, output_len=8, concurrency=2, model=None):
    return asyncio.run(ts.run_load(url, kind, [f"prompt {i}" for i in range(n)], output_len, concurrency, model))


def test_stream_bodies():
    assert ts.stream_body("ensemble", "hi", 8) == {"text_input": "hi", "max_tokens": 8, "end_id": -1, "stream": True}
    body = ts.stream_body("vllm_model", "hi", 8)
    assert {k: v for k, v in body.items() if k != "sampling_parameters"} == {
        "text_input": "hi", "stream": True, "exclude_input_in_output": True}
    assert json.loads(body["sampling_parameters"]) == {"max_tokens": 8, "ignore_eos": True, "temperature": 0}
    with pytest.raises(ValueError, match="kind must be one of"):
        ts.stream_body("tensorrt_llm", "hi", 8)


def test_ensemble_tokens_come_from_sequence_length(fake):
    records, duration = load(fake.url, "ensemble", 4, output_len=8)
    assert duration > 0 and len(records) == 4
    assert [m for m, _ in fake.bodies] == ["ensemble"] * 4
    assert sorted(b["text_input"] for _, b in fake.bodies) == [f"prompt {i}" for i in range(4)]
    assert all(b == ts.stream_body("ensemble", b["text_input"], 8) for _, b in fake.bodies)
    for r in records:
        assert r.ok and r.error == ""
        assert r.tokens == STOP_AT  # what the server made, not output_len: a server that stops early shows
        assert r.ttft_s > 0 and len(r.itl_s) == STOP_AT // CHUNK - 1 and all(g > 0 for g in r.itl_s)
        assert r.e2e_s >= r.ttft_s + sum(r.itl_s) and r.e2e_s < duration + 0.001


def test_vllm_model_without_sequence_length_counts_output_len(fake):
    records, _ = load(fake.url, "vllm_model", 3, output_len=8)
    assert [m for m, _ in fake.bodies] == ["vllm_model"] * 3
    assert all(json.loads(b["sampling_parameters"])["max_tokens"] == 8 for _, b in fake.bodies)
    assert [(r.ok, r.tokens, len(r.itl_s)) for r in records] == [(True, 8, 2)] * 3  # ignore_eos: output_len each


def test_concurrency_is_respected(fake):
    records, _ = load(fake.url, "ensemble", 9, concurrency=3)
    assert all(r.ok for r in records)
    assert fake.peak == 3 and fake.in_flight == 0
    fake.peak = 0
    load(fake.url, "ensemble", 3, concurrency=1)
    assert fake.peak == 1


def test_errors_are_failed_requests_with_their_message(fake):
    records, _ = load(fake.url, "ensemble", 2, model="broken")
    assert [(r.ok, r.error, r.tokens) for r in records] == [(False, "engine failed: out of KV cache", 0)] * 2
    records, _ = load(fake.url, "ensemble", 1, model="bad")
    (bad,) = records
    assert not bad.ok and bad.error.startswith("HTTP 400: ") and "unexpected inference input" in bad.error
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    (refused,), _ = load(closed, "ensemble", 1)
    assert not refused.ok and refused.error.startswith("ClientConnectorError")


def test_summarize_gives_what_normalize_needs(fake):
    target = Target("triton", fake.url, kind="triton-ensemble")
    (run,) = plan([target], [2], served_model="tiny-llama", tokenizer="/tok", input_len=8, output_len=8,
                  prompts_per_stream=3, min_prompts=1, warmup_prompts=0)
    kind = run["backend"].removeprefix("triton-")  # as bench() does it
    records, duration = load(run["base_url"], kind, run["num_prompts"], run["output_len"], run["concurrency"],
                             run["model"])
    failed, _ = load(fake.url, "ensemble", 2, model="broken")
    result = ts.summarize(records + failed, duration)
    assert set(RESULT_KEYS.values()) <= set(result)
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (6, 2, 6 * STOP_AT)
    assert result["errors"] == ["engine failed: out of KV cache"]
    assert result["output_throughput"] == pytest.approx(6 * STOP_AT / duration)
    assert result["request_throughput"] == pytest.approx(6 / duration)
    assert 0 < result["median_ttft_ms"] <= result["p99_ttft_ms"]
    assert 0 < result["median_itl_ms"] <= result["p99_itl_ms"]
    assert result["median_ttft_ms"] < result["median_e2el_ms"] <= result["p99_e2el_ms"]
    row = normalize(run, result)
    assert (row["label"], row["concurrency"], row["repeat"], row["completed"], row["failed"]) == ("triton", 2, 0, 6, 2)
    assert row["output_tokens"] == 6 * STOP_AT and row["duration_s"] == duration and row["error"] is None
    assert json.loads(json.dumps(result)) == result  # bench() writes it as vLLM's result file

    nothing = ts.summarize(failed, 0.0)
    assert nothing["output_throughput"] == nothing["request_throughput"] == nothing["median_ttft_ms"] == 0.0
    row = normalize(run, nothing)
    assert row["completed"] == 0 and row["failed"] == 2 and row["output_throughput"] is None
    assert row["error"] == "every request failed"
    assert ts.summarize([], 1.0)["errors"] == []
