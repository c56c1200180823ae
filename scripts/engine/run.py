"""Run the engine directly, without Triton: the ground truth every later layer must reproduce.

Same command-line shape as TensorRT-LLM's ``examples/run.py``::

    python -m scripts.engine.run --engine_dir build/engine/vllm --tokenizer_dir build/models/tiny-llama \
        --max_output_len 32 --input_text "Ray Serve takes" "Triton loads"

The engine directory's ``engine_config.json`` says which engine runs: vLLM (``cpu`` profile) or
TensorRT-LLM's ``ModelRunner`` (``gpu-trtllm``). Decoding is greedy. ``--output_json`` writes
prompt and output token ids and texts, the reference that Triton and Ray Serve must match.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from scripts.engine.config import VLLM_DTYPES, EngineConfigError, read_engine_config, vllm_engine_kwargs, vllm_environment
from scripts.paths import REPO_ROOT, build_dir, reference_path


class RunError(ValueError):
    """Bad input to run.py; the message says what to fix."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Greedy generation straight from the engine (no Triton)")
    p.add_argument("--engine_dir", required=True, help="engine directory (holds engine_config.json)")
    p.add_argument("--tokenizer_dir", help="tokenizer directory (default: the engine config's)")
    p.add_argument("--input_text", nargs="+", required=True, help="one or more prompts")
    p.add_argument("--max_output_len", type=int, default=32, help="new tokens per prompt")
    p.add_argument("--dtype", help=f"override the engine's dtype ({', '.join(VLLM_DTYPES)})")
    p.add_argument("--ignore_eos", action="store_true", help="always generate max_output_len tokens")
    p.add_argument("--output_json", help="write prompts, token ids and texts to this file")
    return p


def validate(args: argparse.Namespace) -> dict[str, Any]:
    """Check the arguments against the engine config; return the config to run with."""
    config = read_engine_config(args.engine_dir)
    if args.dtype is not None:
        if args.dtype not in VLLM_DTYPES:
            raise RunError(f"--dtype {args.dtype!r} is not a dtype: use one of {', '.join(VLLM_DTYPES)}")
        config = config | {"dtype": args.dtype}
    if args.tokenizer_dir is not None:
        if not (Path(args.tokenizer_dir) / "tokenizer_config.json").is_file():
            raise RunError(f"--tokenizer_dir {args.tokenizer_dir} holds no tokenizer_config.json: point it at the model directory")
        config = config | {"tokenizer_dir": str(Path(args.tokenizer_dir).resolve())}
    for i, text in enumerate(args.input_text):
        if not text.strip():
            raise RunError(f"--input_text #{i} is empty: give a prompt with at least one non-space character")
    if args.max_output_len <= 0:
        raise RunError(f"--max_output_len must be a positive number of tokens, got {args.max_output_len}")
    if args.max_output_len >= int(config["max_model_len"]):
        raise RunError(f"--max_output_len {args.max_output_len} leaves no room for the prompt: "
                       f"the engine's max_model_len is {config['max_model_len']}")
    check_prompt_lengths(config, args.input_text, args.max_output_len)
    return config


def check_prompt_lengths(config: dict[str, Any], prompts: Sequence[str], max_output_len: int) -> None:
    """Reject prompts that cannot fit with their output in ``max_model_len``, before the engine starts."""
    tokenizer_dir = config.get("tokenizer_dir", config["model_dir"])
    if not (Path(tokenizer_dir) / "tokenizer_config.json").is_file():
        raise RunError(f"no tokenizer at {tokenizer_dir}: make the model first (notebook 00_check_environment)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    limit = int(config["max_model_len"]) - max_output_len
    for i, ids in enumerate(tokenizer(list(prompts))["input_ids"]):
        if len(ids) > limit:
            raise RunError(f"--input_text #{i} has {len(ids)} tokens; with --max_output_len {max_output_len} "
                           f"at most {limit} fit in the engine's max_model_len {config['max_model_len']}: shorten it")


def generate_vllm(config: dict[str, Any], prompts: list[str], max_output_len: int, ignore_eos: bool) -> list[dict]:
    os.environ.update(vllm_environment(config))
    from vllm import LLM, SamplingParams

    llm = LLM(**vllm_engine_kwargs(config))
    params = SamplingParams(temperature=0.0, max_tokens=max_output_len, ignore_eos=ignore_eos)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [
        {
            "input_text": o.prompt,
            "input_ids": list(o.prompt_token_ids),
            "output_ids": list(o.outputs[0].token_ids),
            "output_text": o.outputs[0].text,
            "finish_reason": o.outputs[0].finish_reason,
        }
        for o in outputs
    ]


def generate_trtllm(config: dict[str, Any], prompts: list[str], max_output_len: int, ignore_eos: bool) -> list[dict]:
    """TensorRT-LLM's ``ModelRunner`` (runs inside the NGC container only)."""
    import torch
    from tensorrt_llm.runtime import ModelRunner
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config["tokenizer_dir"])
    runner = ModelRunner.from_dir(engine_dir=config["engine_dir"])
    batch = [torch.tensor(tokenizer(p)["input_ids"], dtype=torch.int32) for p in prompts]
    end_id = -1 if ignore_eos else tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = runner.generate(batch, max_new_tokens=max_output_len, end_id=end_id, pad_id=pad_id,
                          temperature=1.0, top_k=1, num_beams=1, return_dict=True)
    torch.cuda.synchronize()
    results = []
    for i, prompt_ids in enumerate(batch):
        length = int(out["sequence_lengths"][i][0])
        new_ids = out["output_ids"][i][0][len(prompt_ids):length].tolist()
        results.append({
            "input_text": prompts[i],
            "input_ids": prompt_ids.tolist(),
            "output_ids": new_ids,
            "output_text": tokenizer.decode(new_ids, skip_special_tokens=True),
            "finish_reason": "length" if len(new_ids) >= max_output_len else "stop",
        })
    return results


def run(args: argparse.Namespace) -> list[dict]:
    config = validate(args)
    generate = generate_vllm if config["engine"] == "vllm" else generate_trtllm
    return generate(config, list(args.input_text), args.max_output_len, args.ignore_eos)


# -- helpers for notebooks: run.py as a command, the way a reader runs it in a terminal -------------

def cli_command(engine_dir: str | Path, prompts: Sequence[str], max_output_len: int,
                output_json: str | Path | None = None, extra: Sequence[str] = ()) -> list[str]:
    cmd = [sys.executable, "-m", "scripts.engine.run", "--engine_dir", str(engine_dir),
           "--max_output_len", str(max_output_len), *extra]
    if output_json is not None:
        cmd += ["--output_json", str(output_json)]
    return cmd + ["--input_text", *prompts]


def show_command(cmd: Sequence[str]) -> str:
    """The command as a reader would type it from the repository root."""
    words = ["python" if w == sys.executable else w for w in cmd]
    root = str(REPO_ROOT) + os.sep
    return shlex.join([w.replace(root, "") for w in words])


def run_cli(cmd: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a command from the repository root, capturing its output (engine logs stay out of the notebook)."""
    return subprocess.run(list(cmd), cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        results = run(args)
    except (RunError, EngineConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for i, r in enumerate(results):
        print(f'Input [Text {i}]: "{r["input_text"]}"')
        print(f'Output [Text {i} Beam 0]: "{r["output_text"]}"')
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps({"max_output_len": args.max_output_len, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
