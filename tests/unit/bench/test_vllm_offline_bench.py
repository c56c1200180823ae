"""scripts.bench.vllm_offline_bench: ``vllm bench throughput`` with the profile's engine settings. The
command is read back by vLLM's own parser; the run itself is notebook 07's (make bench)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from scripts.bench.vllm_offline_bench import LABEL, parse_throughput, throughput_command
from scripts.engine.config import engine_settings
from scripts.profiles import load_profile


PARSE = """
import json, sys
from vllm.benchmarks.throughput import add_cli_args, validate_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
validate_args(args)  # what `vllm bench throughput` checks before it starts the engine
keys = ("model", "tokenizer", "dtype", "max_model_len", "max_num_seqs", "seed", "enforce_eager", "backend", "dataset_name",
        "num_prompts", "random_input_len", "random_output_len", "output_json")
print(json.dumps({key: getattr(args, key) for key in keys}))
"""


def parsed(argv: list[str]) -> argparse.Namespace:
    """``argv`` read by vLLM's own parser, in a fresh interpreter as the command would be (importing
    vLLM's benchmarks pulls in setuptools, whose distutils shim refuses a process that already
    imported the standard library's distutils)."""
    proc = subprocess.run([sys.executable, "-c", PARSE, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return argparse.Namespace(**json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_command_is_vllms_benchmark_with_the_engine_settings_and_the_served_runs_lengths(tmp_path, build_root):
    profile = load_profile("cpu")
    argv = throughput_command(engine_settings(profile), num_prompts=48, input_len=32, output_len=16, seed=3,
                              output_json=tmp_path / "r.json")
    assert argv[:5] == [sys.executable, "-m", "scripts.bench.vllm_cli", "bench", "throughput"]
    args = parsed(argv[5:])
    assert args.model == str(build_root / "models" / "tiny-llama") and args.tokenizer == args.model
    assert (args.dtype, args.max_model_len, args.max_num_seqs, args.seed) == (profile["dtype"], profile["max_model_len"],
                                                                              profile["max_num_seqs"], 3)
    assert args.enforce_eager is profile["enforce_eager"] and args.backend == "vllm"
    assert (args.dataset_name, args.num_prompts, args.random_input_len, args.random_output_len) == ("random", 48, 32, 16)
    assert argv.count("--seed") == 1
    assert args.output_json == str(tmp_path / "r.json")
    with pytest.raises(ValueError, match=">= 1"):
        throughput_command(engine_settings(profile), num_prompts=0, input_len=32, output_len=16, seed=0,
                           output_json=tmp_path / "r.json")


def test_the_rates_come_from_vllms_summary_line():
    printout = "INFO loading\nThroughput: 25.31 requests/s, 1619.84 total tokens/s, 809.92 output tokens/s\nTotal num prompt tokens:  1024\n"
    assert parse_throughput(printout) == {"request_throughput": 25.31, "total_token_throughput": 1619.84,
                                          "output_throughput": 809.92}
    with pytest.raises(ValueError, match="no 'Throughput"):
        parse_throughput("Traceback ...")
    assert "offline" in LABEL
