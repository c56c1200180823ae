"""The engine with nothing in front: ``vllm bench throughput``, vLLM's own offline benchmark.

It builds vLLM's ``LLM`` in its own process, hands it every prompt at once and reports the
throughput (vllm 0.32 ``vllm/benchmarks/throughput.py``, ``main``): the ceiling that every server
in front of the same engine is measured against. The run uses the engine settings of the profile
(the same ``vllm_engine_kwargs`` and ``vllm_environment`` as ``vllm serve`` and Triton's engine
model), the ``random`` dataset with the lengths and seed of the served runs, and ``ignore_eos`` (the
benchmark sets it on every request), so each request makes its full ``output_len`` tokens.

The command runs through :mod:`scripts.bench.vllm_cli`, like ``vllm serve``. Its JSON result has no
output-token rate, so :func:`parse_throughput` reads vLLM's own summary line::

    Throughput: 25.31 requests/s, 1619.84 total tokens/s, 809.92 output tokens/s
"""
from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

from scripts.bench.vllm_cli import require_vllm
from scripts.bench.vllm_server import engine_environment, serve_flags
from scripts.engine.config import vllm_engine_kwargs
from scripts.paths import REPO_ROOT
from scripts.procs.process_guard import OWNER_GONE_GRACE_S, run_guarded

LABEL = "vLLM offline (vllm bench throughput)"
_SUMMARY = re.compile(r"Throughput: ([\d.]+) requests/s, ([\d.]+) total tokens/s, ([\d.]+) output tokens/s")


def throughput_command(config: dict[str, Any], *, num_prompts: int, input_len: int, output_len: int, seed: int,
                       output_json: Path) -> list[str]:
    """``vllm bench throughput`` for the engine ``config`` (``engine_config.json``'s settings)."""
    if num_prompts < 1 or input_len < 1 or output_len < 1:
        raise ValueError(f"num_prompts, input_len and output_len must be >= 1, got {num_prompts}, {input_len}, {output_len}")
    # the run's seed samples the prompts (and seeds the engine, which decodes greedily here)
    model, *engine_flags = serve_flags(vllm_engine_kwargs(config) | {"seed": seed})
    # --random-input-len, not --input-len: the CLI's random dataset has its own defaults (1024 in,
    # 128 out), which win over --input-len (throughput.py, validate_args: "The random version ... will
    # be preferred")
    return [sys.executable, "-m", "scripts.bench.vllm_cli", "bench", "throughput", "--model", model, *engine_flags,
            "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--output-json", str(output_json)]


def parse_throughput(printout: str) -> dict[str, float]:
    """Request, total-token and output-token rates from vLLM's summary line; ValueError if it is missing."""
    found = _SUMMARY.findall(printout)
    if not found:
        raise ValueError("no 'Throughput: ... output tokens/s' line in vllm bench throughput's output")
    requests, total, output = (float(x) for x in found[-1])
    return {"request_throughput": requests, "total_token_throughput": total, "output_throughput": output}


def run_offline(config: dict[str, Any], result_dir: Path, *, num_prompts: int, input_len: int, output_len: int,
                seed: int = 0, timeout_s: float = 600) -> dict[str, Any]:
    """Run the offline benchmark once; its printout goes to ``result_dir/offline.log``. Returns a row
    with ``label``, the rates, ``duration_s`` and ``num_prompts``; RuntimeError with the log's tail if
    the run fails or passes ``timeout_s``. The run has a process group of its own with the detached
    guard inside (vLLM's engine process goes with it if this process dies), and nothing of the group
    outlives the call."""
    require_vllm()
    result_dir.mkdir(parents=True, exist_ok=True)
    result_json, log_path = result_dir / "offline.json", result_dir / "offline.log"
    result_json.unlink(missing_ok=True)
    cmd = throughput_command(config, num_prompts=num_prompts, input_len=input_len, output_len=output_len, seed=seed,
                             output_json=result_json)
    status = run_guarded(cmd, log_path, env=engine_environment(config), cwd=REPO_ROOT, grace_s=OWNER_GONE_GRACE_S,
                         timeout_s=timeout_s)
    printout = log_path.read_text(errors="replace")
    if status != 0 or not result_json.is_file():
        why = f"ran past {timeout_s:.0f} s" if status == -signal.SIGKILL else f"exited with status {status}"
        raise RuntimeError(f"vllm bench throughput {why}; log {log_path}:\n{printout[-1500:]}")
    saved = json.loads(result_json.read_text())
    return {"label": LABEL, **parse_throughput(printout), "duration_s": saved["elapsed_time"],
            "num_prompts": saved["num_requests"], "input_len": input_len, "output_len": output_len}
