"""The Serve benchmark and the background load, against the real routes on a loopback port
(a fake Triton behind them) and a fake Triton ensemble for the direct side."""
import asyncio
import json
import socket
import time

import pytest

from scripts.bench import serve as bench
from scripts.triton.client import Chunk

from fakes import CHUNKS_TEXT, FACTS, FakeEnsemble, FakeTokenizer, fake_service, serving


def long_service(**kw):
    """Room for the chat data's questions (the fake tokenizer spends a token per character)."""
    return fake_service(max_model_len=4096, **kw)


@pytest.fixture
def service():
    return long_service()


@pytest.fixture
def base(service):
    with serving(service) as url:
        yield url


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again once this returns


def test_bench_messages_cycle_the_chat_questions():
    messages = bench.bench_messages(50)
    assert len(messages) == 50 and all(m[0]["role"] == "user" and m[0]["content"].strip() for m in messages)
    distinct = len({m[0]["content"] for m in messages})
    assert 1 < distinct < 50 and messages[distinct] == messages[0]


def test_chat_client_sends_greedy_requests_and_reports_failures(base, service):
    async def go(url, **kw):
        async with bench.ChatClient(url, 2, 6, **kw) as client:
            return await client.send([{"role": "user", "content": "hi"}])

    reply = asyncio.run(go(base))
    assert (reply.text, reply.tokens, reply.error) == (CHUNKS_TEXT, 4, None)
    sent = service.backend.calls[-1]
    assert sent["max_tokens"][0, 0] == 6 and "temperature" not in sent  # greedy
    refused = asyncio.run(go(base, model="gpt-4o"))
    assert refused.text is None and refused.error.startswith("HTTP 404: ") and "gpt-4o" in refused.error
    unreachable = asyncio.run(go(closed_port_url()))
    assert unreachable.text is None and unreachable.error.startswith("ConnectError")


def test_run_serve_counts_texts_tokens_and_errors(base):
    conversations = bench.bench_messages(5)
    stats, texts = asyncio.run(bench.run_serve(base, conversations, 8, concurrency=2))
    assert texts == [CHUNKS_TEXT] * 5
    assert (stats["requests"], stats["succeeded"], stats["tokens"], stats["errors"]) == (5, 5, 20, [])
    assert stats["tok_per_s"] == pytest.approx(20 / stats["wall_s"])
    stats, texts = asyncio.run(bench.run_serve(base, conversations, 8, concurrency=2, model="other"))
    assert texts == [None] * 5 and stats["succeeded"] == stats["tokens"] == 0 and len(stats["errors"]) == 3


def test_background_load_keeps_requests_in_flight_until_stopped(base, service):
    load = bench.BackgroundLoad(base, concurrency=3, max_tokens=4).start()
    deadline = time.monotonic() + 30
    while len(service.backend.calls) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    burst = load.stop()
    assert set(burst) == {"sent", "succeeded", "errors", "error_count"}
    assert burst["sent"] >= 10 and burst["succeeded"] == burst["sent"] and burst["error_count"] == 0
    assert burst["sent"] == len(service.backend.calls)  # every request it counted reached the app


def test_background_load_counts_the_errors_it_gets():
    with serving(long_service(fail=0)) as url:
        burst = bench.BackgroundLoad(url, concurrency=2).start().stop()
    assert burst["sent"] >= 1 and burst["succeeded"] == 0 and burst["error_count"] == burst["sent"]
    assert burst["errors"][0].startswith("HTTP 500: ") and len(burst["errors"]) <= 3


@pytest.fixture
def direct_triton(monkeypatch):
    """Triton direct, faked: every ensemble the benchmark opens answers with ``triton.chunks``."""
    triton = FakeEnsemble()
    opened = []

    def open_ensemble(grpc_url, model_name="ensemble"):
        opened.append(grpc_url)
        return triton

    monkeypatch.setattr(bench, "GrpcModel", open_ensemble)
    monkeypatch.setattr(bench, "repository_facts", lambda _repo: FACTS)
    monkeypatch.setattr(bench, "load_tokenizer", lambda _dir: FakeTokenizer())
    triton.opened = opened
    return triton


def test_serve_vs_triton_reports_the_median_round_and_prints_each_round(base, direct_triton):
    lines = []
    result = bench.serve_vs_triton(base, "127.0.0.1:1", "repo", requests=6, concurrency=3, max_tokens=8, rounds=3, warmup=2,
                           log=lines.append)
    assert result["all_succeeded"] and result["all_same_text"] and result["same_text"] == 6
    assert result["ratio"] == sorted(result["ratios"])[1] and len(result["ratios"]) == 3
    assert result["triton"]["requests"] == result["serve"]["requests"] == 6 and result["serve"]["tokens"] == 24
    assert direct_triton.requests == 2 + 3 * 6 and direct_triton.closed and set(direct_triton.opened) == {"127.0.0.1:1"}
    assert [line.split(":")[0] for line in lines[:3]] == ["round 1/3", "round 2/3", "round 3/3"]
    assert lines[3] == bench.summary(result, 6) and "ratio Serve / Triton" in lines[3]


def test_serve_vs_triton_notices_different_text_and_failed_requests(direct_triton):
    direct_triton.chunks = [Chunk("something else", 2)]
    with serving(long_service(fail=1)) as url:
        # as notebook 05 calls it: from a thread, the kernel's event loop running meanwhile
        result = asyncio.run(asyncio.to_thread(bench.serve_vs_triton, url, "127.0.0.1:1", "repo", requests=4, concurrency=2,
                                               rounds=1, warmup=1, log=None))
    assert not result["all_succeeded"] and not result["all_same_text"] and result["same_text"] == 0
    assert result["serve"]["succeeded"] == 0 and result["triton"]["succeeded"] == 4


def test_the_command_line_ends_with_the_results_json(base, direct_triton, capsys):
    code = bench.main(["--serve-url", base, "--triton-grpc", "127.0.0.1:1", "--model-repository", "repo",
                       "--requests", "4", "--concurrency", "2", "--max-tokens", "8", "--rounds", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert code == 0 and {"triton", "serve", "ratios", "all_succeeded", "all_same_text"} <= set(result)
    assert out[0].startswith("round 1/1") and result["all_same_text"]
