"""Run the engine directly, without Triton: the ground truth every later layer must reproduce.

Same command-line shape as TensorRT-LLM's ``examples/run.py``::

    python -m scripts.engine.run --engine_dir build/engine/vllm --tokenizer_dir build/models/tiny-llama \
        --max_output_len 32 --input_text "Ray Serve takes" "Triton loads"

The engine directory's ``engine_config.json`` says which engine runs: vLLM (``cpu`` profile),
transformers' continuous batching (``gpu-transformers``) or TensorRT-LLM (``gpu-trtllm``). On TensorRT-LLM the default runtime is ``ModelRunnerCpp``, the C++
runtime (the executor that Triton's ``tensorrtllm`` backend runs too), as in upstream ``run.py``;
``--use_py_session`` picks the Python ``ModelRunner``. Greedy fp16 text can differ between the two,
so the reference comes from the one Triton uses. Decoding is greedy. ``--output_json`` writes prompt
and output token ids and texts (and the tokenizer's ``bos_token_id``), the reference that Triton and
Ray Serve must match. Every engine's output text is its ids decoded by
:func:`scripts.model.tokenizer.decode_ids`, as the ensemble and the Serve replica decode them (not
vLLM's own ``RequestOutput.text``, which drops an unfinished character at the end).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from scripts.engine import vllm_offline
from scripts.engine.config import VLLM_DTYPES, EngineConfigError, read_engine_config
from scripts.model.tokenizer import decode_ids, end_and_pad_ids
from scripts.paths import REPO_ROOT


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
    # TensorRT-LLM@v0.17.0:examples/utils.py (add_common_args) defines --use_py_session for run.py:
    # without it run.py takes ModelRunnerCpp, with it the Python ModelRunner. vLLM ignores it.
    p.add_argument("--use_py_session", action="store_true",
                   help="TensorRT-LLM only: the Python runtime (ModelRunner) instead of the C++ one (ModelRunnerCpp)")
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


def load_tokenizer(config: dict[str, Any]):
    tokenizer_dir = config.get("tokenizer_dir", config["model_dir"])
    if not (Path(tokenizer_dir) / "tokenizer_config.json").is_file():
        raise RunError(f"no tokenizer at {tokenizer_dir}: make the model first (notebook 00_check_environment)")
    from scripts.model.tokenizer import load_tokenizer as load  # noqa: PLC0415 - transformers

    return load(tokenizer_dir)


def check_prompt_lengths(config: dict[str, Any], prompts: Sequence[str], max_output_len: int) -> None:
    """Reject prompts that cannot fit with their output in ``max_model_len``, or that are longer than a
    TensorRT-LLM engine's ``max_input_len``, before the engine starts."""
    tokenizer = load_tokenizer(config)
    limit = int(config["max_model_len"]) - max_output_len
    max_input_len = engine_max_input_len(config)
    for i, ids in enumerate(tokenizer(list(prompts))["input_ids"]):
        if max_input_len and len(ids) > max_input_len:
            raise RunError(f"--input_text #{i} has {len(ids)} tokens, more than the TensorRT-LLM engine's max_input_len "
                           f"of {max_input_len} (the longest prompt trtllm-build --max_input_len built it for): shorten it, "
                           "or rebuild the engine with a larger max_input_len")
        if len(ids) > limit:
            raise RunError(f"--input_text #{i} has {len(ids)} tokens; with --max_output_len {max_output_len} "
                           f"at most {limit} fit in the engine's max_model_len {config['max_model_len']}: shorten it")


# -- vLLM (cpu profile) -----------------------------------------------------------------------

def generate_vllm(config: dict[str, Any], prompts: list[str], max_output_len: int, ignore_eos: bool) -> list[dict]:
    """vLLM's offline ``LLM.generate`` (the same call ``scripts.bench.triton`` times); one prompt at a
    time where the engine config says greedy output depends on the batch (``batch_invariant`` false)."""
    tokenizer = load_tokenizer(config)
    run = vllm_offline.generate(config, prompts, max_output_len, ignore_eos=ignore_eos,
                                one_at_a_time=config.get("batch_invariant") is False)
    return [
        {
            "input_text": o.prompt,
            "input_ids": list(o.prompt_token_ids),
            "output_ids": list(o.outputs[0].token_ids),
            "output_text": decode_ids(tokenizer, o.outputs[0].token_ids),
            "finish_reason": o.outputs[0].finish_reason,
        }
        for o in run.outputs
    ]


# -- transformers continuous batching (gpu-transformers profile) ------------------------------

def generate_transformers(config: dict[str, Any], prompts: list[str], max_output_len: int, ignore_eos: bool) -> list[dict]:
    """The engine Triton's ``transformers_engine`` runs, fed one prompt at a time as the notebooks' clients
    send them: in bf16 a batch of other shapes rounds differently, and greedy text can follow."""
    from scripts.engine import transformers_cb  # noqa: PLC0415 - heavy

    tokenizer = load_tokenizer(config)
    encoded = [tokenizer(p)["input_ids"] for p in prompts]
    run = transformers_cb.generate(config, encoded, max_output_len, ignore_eos=ignore_eos, one_at_a_time=True)
    results = []
    for prompt, ids, out in zip(prompts, encoded, run.outputs):
        new_ids = list(out.generated_tokens)
        results.append({"input_text": prompt, "input_ids": list(ids), "output_ids": new_ids,
                        "output_text": decode_ids(tokenizer, new_ids),
                        "finish_reason": "length" if len(new_ids) >= max_output_len else "stop"})
    return results


# -- TensorRT-LLM (gpu-trtllm profile) ------------------------------------------------------

def engine_max_batch_size(config: dict[str, Any]) -> int:
    """The largest batch the engine takes in one ``generate`` call.

    ``trtllm-build`` records it in the engine's ``config.json`` under ``build_config.max_batch_size``
    (TensorRT-LLM@v0.17.0:tensorrt_llm/builder.py, ``BuildConfig``); ``engine_config.json`` repeats
    the profile's value, used where the engine's own file is absent.
    """
    engine_json = Path(config["engine_dir"]) / "config.json"
    if engine_json.is_file():
        build = json.loads(engine_json.read_text()).get("build_config", {})
        if build.get("max_batch_size"):
            return int(build["max_batch_size"])
    if config.get("max_batch_size"):
        return int(config["max_batch_size"])
    raise RunError(f"{engine_json} gives no build_config.max_batch_size: rebuild the engine (notebook 01_build_engine)")


def engine_max_input_len(config: dict[str, Any]) -> int | None:
    """A TensorRT-LLM engine's longest prompt (None for other engines): ``build_config.max_input_len``
    of the engine's ``config.json``, else ``engine_config.json``'s. Both runners refuse a longer one with
    a RuntimeError (``_check_inputs`` in tensorrt_llm/runtime/model_runner.py and model_runner_cpp.py),
    and the C++ executor throws ("Prompt length (N) exceeds maximum input length (M)", ``LlmRequest::
    validate``): both read in TensorRT-LLM versions before and after 0.17, not at the v0.17.0 tag."""
    if config.get("engine") != "tensorrt_llm":
        return None
    engine_json = Path(config["engine_dir"]) / "config.json"
    if engine_json.is_file():
        build = json.loads(engine_json.read_text()).get("build_config", {})
        if build.get("max_input_len"):
            return int(build["max_input_len"])
    return int(config["max_input_len"]) if config.get("max_input_len") else None


def reference_batch_size(config: dict[str, Any]) -> int:
    """Prompts per ``generate`` call: the engine's ``max_batch_size`` where the engine config says greedy
    output is batch-invariant, else 1. fp16 on a GPU is not (the profile's ``batch_invariant``): a
    prompt batched with others can round, and so decode, differently from the same prompt sent alone,
    as Triton's clients send it (notebooks 04 and 05); the gpu-transformers reference is made one
    prompt at a time for the same reason. A config that does not say counts as not invariant."""
    return engine_max_batch_size(config) if config.get("batch_invariant") is True else 1


def in_batches(items: Sequence[Any], size: int) -> list[list[Any]]:
    """``items`` in order, cut into lists of at most ``size``."""
    if size < 1:
        raise ValueError(f"batch size must be positive, got {size}")
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def trtllm_runner_class(use_py_session: bool) -> tuple[type, str]:
    """``ModelRunnerCpp`` unless asked for the Python session or the C++ bindings are missing
    (TensorRT-LLM@v0.17.0:examples/run.py falls back the same way, on ``PYTHON_BINDINGS``)."""
    import tensorrt_llm.runtime as runtime  # noqa: PLC0415 - only inside the NGC container

    if not use_py_session and not getattr(runtime, "PYTHON_BINDINGS", False):
        print("warning: TensorRT-LLM's C++ bindings are unavailable; using the Python session (ModelRunner)",
              file=sys.stderr)
        use_py_session = True
    if use_py_session:
        return runtime.ModelRunner, "ModelRunner"
    return runtime.ModelRunnerCpp, "ModelRunnerCpp"


def trtllm_runner_kwargs(config: dict[str, Any], use_py_session: bool, rank: int, max_batch_size: int,
                         max_input_len: int, max_output_len: int) -> dict[str, Any]:
    """``from_dir`` keyword arguments, as TensorRT-LLM@v0.17.0:examples/run.py passes them.

    Both runners take ``engine_dir`` and ``rank`` (tensorrt_llm/runtime/model_runner.py and
    model_runner_cpp.py, ``from_dir``); only ``ModelRunnerCpp.from_dir`` sizes the executor with
    ``max_batch_size``, ``max_input_len``, ``max_output_len`` and ``max_beam_width`` (each at most
    the engine's own limit).
    """
    kwargs: dict[str, Any] = {"engine_dir": str(config["engine_dir"]), "rank": rank}
    if not use_py_session:
        kwargs |= {"max_batch_size": max_batch_size, "max_input_len": max_input_len,
                   "max_output_len": max_output_len, "max_beam_width": 1}
    return kwargs


def generate_trtllm(config: dict[str, Any], prompts: list[str], max_output_len: int, ignore_eos: bool,
                    use_py_session: bool = False) -> tuple[list[dict], str]:
    """Greedy generation with TensorRT-LLM's runtime (inside the NGC container only).

    Returns the results in prompt order and the runner's class name. Prompts go to ``generate`` one at
    a time, or in batches of at most the engine's ``max_batch_size`` where the engine is batch-invariant
    (:func:`reference_batch_size`): a larger batch is refused (``ModelRunnerMixin._check_inputs`` in
    TensorRT-LLM@v0.17.0:tensorrt_llm/runtime/model_runner.py).
    """
    if int(config.get("tp_size", 1)) * int(config.get("pp_size", 1)) != 1:
        raise RunError("run.py runs one process: for a multi-GPU engine use mpirun with TensorRT-LLM's examples/run.py")
    import tensorrt_llm  # noqa: PLC0415 - only inside the NGC container
    import torch  # noqa: PLC0415

    runner_cls, runtime_name = trtllm_runner_class(use_py_session)
    use_py_session = runtime_name == "ModelRunner"
    tokenizer = load_tokenizer(config)
    encoded = [torch.tensor(tokenizer(p)["input_ids"], dtype=torch.int32) for p in prompts]
    batch_size = min(reference_batch_size(config), len(prompts))
    runner = runner_cls.from_dir(**trtllm_runner_kwargs(
        config, use_py_session, rank=tensorrt_llm.mpi_rank(), max_batch_size=batch_size,
        max_input_len=max(int(ids.size(0)) for ids in encoded), max_output_len=max_output_len))
    end_id, pad_id = end_and_pad_ids(tokenizer, ignore_eos)
    results = []
    for batch_prompts, batch in zip(in_batches(prompts, batch_size), in_batches(encoded, batch_size)):
        with torch.no_grad():
            # The keyword arguments of TensorRT-LLM@v0.17.0:examples/run.py's runner.generate call; the
            # result holds "sequence_lengths" only with output_sequence_lengths=True (both runners).
            out = runner.generate(batch_input_ids=batch, max_new_tokens=max_output_len, end_id=end_id,
                                  pad_id=pad_id, temperature=1.0, top_k=1, top_p=0.0, num_beams=1,
                                  output_sequence_lengths=True, return_dict=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        for i, prompt_ids in enumerate(batch):
            # output_ids[i][beam] holds the prompt, then the new tokens up to sequence_lengths[i][beam]
            length = int(out["sequence_lengths"][i][0])
            new_ids = out["output_ids"][i][0][int(prompt_ids.size(0)):length].tolist()
            results.append({
                "input_text": batch_prompts[i],
                "input_ids": prompt_ids.tolist(),
                "output_ids": new_ids,
                "output_text": decode_ids(tokenizer, new_ids),
                "finish_reason": "length" if len(new_ids) >= max_output_len else "stop",
            })
    return results, runtime_name


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The reference: settings, the tokenizer's ``bos_token_id`` and one result per prompt, in order."""
    config = validate(args)
    prompts = list(args.input_text)
    if config["engine"] == "vllm":
        results, runtime = generate_vllm(config, prompts, args.max_output_len, args.ignore_eos), "vllm.LLM"
    elif config["engine"] == "transformers":
        results = generate_transformers(config, prompts, args.max_output_len, args.ignore_eos)
        runtime = "transformers continuous batching"
    else:
        results, runtime = generate_trtllm(config, prompts, args.max_output_len, args.ignore_eos,
                                           use_py_session=args.use_py_session)
    return {"max_output_len": args.max_output_len, "engine": config["engine"], "runtime": runtime,
            "bos_token_id": load_tokenizer(config).bos_token_id, "results": results}


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


def run_and_show(cmd: Sequence[str], timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    """Run a command as :func:`run_cli` does and print what it printed (with the tail of its error
    output when it fails); returns the process and the seconds it took, start-up included."""
    start = time.monotonic()
    proc = run_cli(cmd, timeout)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
    print(proc.stdout)
    return proc, elapsed


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        reference = run(args)
    except (RunError, EngineConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for i, r in enumerate(reference["results"]):
        print(f'Input [Text {i}]: "{r["input_text"]}"')
        print(f'Output [Text {i} Beam 0]: "{r["output_text"]}"')
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(reference, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
