"""The Serve benchmark, against the real routes on a loopback port (a fake Triton behind them) and
a fake Triton ensemble for the direct side."""
import asyncio
import json

import pytest

from scripts.bench import serve as bench
from scripts.clients.chat import bench_messages
from scripts.triton.client import Chunk

from fakes import FACTS, CHUNKS_TEXT, FakeEnsemble, FakeTokenizer, long_service, serving


def test_run_serve_counts_texts_tokens_and_errors(chat_url):
    conversations = bench_messages(5)
    stats, texts = asyncio.run(bench.run_serve(chat_url, conversations, 8, concurrency=2))
    assert texts == [CHUNKS_TEXT] * 5
    assert (stats["requests"], stats["succeeded"], stats["tokens"], stats["errors"]) == (5, 5, 20, [])
    assert stats["tok_per_s"] == pytest.approx(20 / stats["wall_s"])
    stats, texts = asyncio.run(bench.run_serve(chat_url, conversations, 8, concurrency=2, model="other"))
    assert texts == [None] * 5 and stats["succeeded"] == stats["tokens"] == 0 and len(stats["errors"]) == 3


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


def test_serve_vs_triton_reports_the_median_round_and_prints_each_round(chat_url, direct_triton):
    lines = []
    result = bench.serve_vs_triton(chat_url, "127.0.0.1:1", "repo", requests=6, concurrency=3, max_tokens=8, rounds=3, warmup=2,
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


def test_the_command_line_ends_with_the_results_json(chat_url, direct_triton, capsys):
    code = bench.main(["--serve-url", chat_url, "--triton-grpc", "127.0.0.1:1", "--model-repository", "repo",
                       "--requests", "4", "--concurrency", "2", "--max-tokens", "8", "--rounds", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert code == 0 and {"triton", "serve", "ratios", "all_succeeded", "all_same_text"} <= set(result)
    assert out[0].startswith("round 1/1") and result["all_same_text"]
