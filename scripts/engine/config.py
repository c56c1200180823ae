"""Engine preparation: the one engine config file later steps read, and the TensorRT-LLM build.

Why it is built this way, and the sources: docs/design/engine.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from scripts.engine import flashinfer_switch
from scripts.profile_model import VLLM_START_METHODS
from scripts.profiles import Profile, load_profile

ENGINE_CONFIG = "engine_config.json"
VLLM_DTYPES = ("bfloat16", "float16", "float32")
#: VLLM_START_METHODS (from ``scripts.profile_model``, which checks the profile's ``engine_start_method``
#: when it loads): how a vLLM engine inside Triton starts its processes (the engine core, then its worker).
#: "spawn" is what vLLM's CPU platform sets (``vllm/platforms/cpu.py`` at 0.32.0,
#: ``check_and_update_config``): each process is a fresh interpreter that imports vLLM and torch
#: again, about 5 s of CPU each. "fork" copies the Triton model's process, which has imported them
#: already and run no torch operation yet, so no OpenMP thread pool is copied half-made; the worker
#: then binds its OpenMP threads itself (``scripts.engine.forked_worker``: a fork cannot inherit it).
#: "auto" leaves the choice to vLLM (the ``gpu-vllm`` profile: on CUDA vLLM forks its engine core while
#: CUDA has not started in the parent, and spawns otherwise).
#: This tutorial's settings in a vLLM ``model.json`` and engine config (not vLLM engine arguments),
#: with the value each takes where a config lacks it.
#: ``response_threads``: who hands the engine model's responses to Triton (scripts.triton.backend.outbox).
VLLM_OWN_DEFAULTS = {"kv_cache_space_gib": 1, "start_method": "spawn", "response_threads": 0}
VLLM_OWN_KEYS = tuple(VLLM_OWN_DEFAULTS)
#: the worker a forked engine runs, as vLLM's ``worker_cls`` names it (that module imports vLLM)
FORKED_WORKER_CLS = "scripts.engine.forked_worker.ForkedCPUWorker"
TRTLLM_DTYPES = ("float16", "bfloat16", "float32")


class EngineConfigError(ValueError):
    """The engine directory or its config is missing or invalid; the message says what to do."""


def check_dtype(dtype: str, engine: str) -> str:
    allowed = TRTLLM_DTYPES if engine == "tensorrt_llm" else VLLM_DTYPES
    if dtype not in allowed:
        raise EngineConfigError(f"dtype {dtype!r} is not supported by {engine}: use one of {', '.join(allowed)}")
    return dtype


def check_start_method(method: str) -> str:
    if method not in VLLM_START_METHODS:
        raise EngineConfigError(f"engine_start_method {method!r} is not one of {', '.join(VLLM_START_METHODS)}")
    return method


def engine_settings(profile: Profile) -> dict[str, Any]:
    """The engine config for a profile, as written to ``engine_config.json``."""
    common = {
        "profile": profile.name,
        "engine": profile.engine,
        "model_dir": str(profile.path("model_dir")),
        "tokenizer_dir": str(profile.path("model_dir")),
        "dtype": check_dtype(profile["dtype"], profile.engine),
        "max_model_len": int(profile["max_model_len"]),
    }
    if profile.engine == "vllm":
        return common | {
            "max_num_seqs": int(profile["max_num_seqs"]),
            "kv_cache_space_gib": int(profile["kv_cache_space_gib"]),
            "tensor_parallel_size": int(profile["tensor_parallel_size"]),
            "seed": int(profile["seed"]),
            "enforce_eager": profile["enforce_eager"],
            "start_method": profile["engine_start_method"],
            "response_threads": int(profile["engine_response_threads"]),
        } | vllm_gpu_settings(profile)
    if profile.engine == "transformers":
        return common | {
            "max_num_seqs": int(profile["max_num_seqs"]),
            "device": profile["device"],
            "kv_cache_free_gpu_mem_fraction": float(profile["kv_cache_free_gpu_mem_fraction"]),
            "kv_cache_space_gib": float(profile["kv_cache_space_gib"]),
            "page_size": int(profile["page_size"]),
            "seed": int(profile["seed"]),
        }
    if profile.engine == "tensorrt_llm":
        return common | {
            "engine_dir": str(profile.path("engine_dir")),
            "checkpoint_dir": str(profile.path("checkpoint_dir")),
            "tp_size": int(profile["tp_size"]),
            "pp_size": int(profile["pp_size"]),
            "gemm_plugin": profile["gemm_plugin"],
            "max_batch_size": int(profile["max_batch_size"]),
            "max_input_len": int(profile["max_input_len"]),
            "max_seq_len": int(profile["max_seq_len"]),
            # run.py batches the reference's prompts only where greedy output does not depend on the batch
            "batch_invariant": bool(profile["batch_invariant"]),
        }
    raise EngineConfigError(f"profile {profile.name!r} names an unknown engine {profile.engine!r}")


def engine_batch(profile: Profile) -> int:
    """The most sequences the profile's engine runs in one step: TensorRT-LLM's ``max_batch_size`` (built
    into the engine by ``trtllm-build``), vLLM's and transformers' ``max_num_seqs``. A Serve replica should
    hold no more ongoing requests than this (``serve_max_ongoing_requests``): the rest wait in Serve's queue."""
    return profile["max_batch_size" if profile.engine == "tensorrt_llm" else "max_num_seqs"]  # >= 1 (profile_model)


def vllm_gpu_settings(profile: Profile) -> dict[str, Any]:
    """The GPU-only vLLM settings a profile sets (none on ``cpu``, so its engine config stays as it was). Their
    values (a fraction in (0, 1], a known kind, no ``fork`` on KIND_GPU) were checked when the profile loaded."""
    out: dict[str, Any] = {}
    if "gpu_memory_utilization" in profile:
        out["gpu_memory_utilization"] = profile["gpu_memory_utilization"]
    if "instance_kind" in profile:
        out["instance_kind"] = profile["instance_kind"]
        # run.py's reference, like the Triton clients, takes the prompts one at a time on a GPU
        out["batch_invariant"] = bool(profile["batch_invariant"])
    return out


def write_engine_config(profile: Profile) -> Path:
    """Write ``engine_config.json`` into the profile's engine directory and return its path."""
    settings = engine_settings(profile)
    engine_dir = profile.path("engine_dir")
    engine_dir.mkdir(parents=True, exist_ok=True)
    path = engine_dir / ENGINE_CONFIG
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


def read_engine_config(engine_dir: str | Path) -> dict[str, Any]:
    """Read and validate an engine directory's config; errors say which step to run."""
    engine_dir = Path(engine_dir)
    if not engine_dir.is_dir():
        raise EngineConfigError(
            f"engine directory {engine_dir} does not exist: build the engine first "
            "(notebook 01_build_engine, or `tutorial-build-engine --profile PROFILE`)"
        )
    path = engine_dir / ENGINE_CONFIG
    if not path.is_file():
        if (engine_dir / "config.json").is_file() and any(engine_dir.glob("*.engine")):
            return {"engine": "tensorrt_llm", "engine_dir": str(engine_dir)}  # a bare trtllm-build output
        raise EngineConfigError(
            f"{engine_dir} holds no {ENGINE_CONFIG}: build the engine first "
            "(notebook 01_build_engine, or `tutorial-build-engine --profile PROFILE`)"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise EngineConfigError(f"{path} is not valid JSON ({exc}): rebuild it with notebook 01_build_engine") from None
    for key in ("engine", "dtype", "model_dir", "max_model_len"):
        if key not in config:
            raise EngineConfigError(f"{path} lacks {key!r}: rebuild it with notebook 01_build_engine")
    check_dtype(config["dtype"], config["engine"])
    return config


# -- vLLM (cpu profile) -----------------------------------------------------------------------

def vllm_environment(config: dict[str, Any]) -> dict[str, str]:
    """Environment variables a vLLM engine process needs (set before ``import vllm``)."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(config.get("kv_cache_space_gib", VLLM_OWN_DEFAULTS["kv_cache_space_gib"])),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # vLLM logs to stdout by default; keep stdout for results (run.py prints them there)
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    } | flashinfer_switch.sampler_environment()


def vllm_engine_args_class(start_method: str, *, offline: bool = False):
    """``vllm.AsyncEngineArgs`` (``vllm.EngineArgs`` for ``offline``, what ``vllm.LLM`` builds), or for
    ``start_method="fork"`` a subclass whose engine processes fork and whose worker is
    ``ForkedCPUWorker`` (where ``worker_cls`` is left to the platform).

    vLLM's CPU platform sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` while it builds the engine's
    config, and the engine reads it right after, when it starts its core process (which reads it
    again for its worker): the only moment to choose is between the two, in ``create_engine_config``.
    """
    from vllm import AsyncEngineArgs, EngineArgs  # noqa: PLC0415

    base = EngineArgs if offline else AsyncEngineArgs
    if check_start_method(start_method) in ("spawn", "auto"):
        return base

    class ForkingEngineArgs(base):
        def create_engine_config(self, *args, **kwargs):
            if self.worker_cls == "auto":  # the worker binds its OpenMP threads itself (forked_worker)
                self.worker_cls = FORKED_WORKER_CLS
            config = super().create_engine_config(*args, **kwargs)
            os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
            return config

    return ForkingEngineArgs


def vllm_engine_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` / ``vllm.AsyncEngineArgs`` from the engine config."""
    return {
        "model": config["model_dir"],
        "tokenizer": config.get("tokenizer_dir", config["model_dir"]),
        "dtype": config["dtype"],
        "max_model_len": int(config["max_model_len"]),
        "max_num_seqs": int(config.get("max_num_seqs", 64)),
        "tensor_parallel_size": int(config.get("tensor_parallel_size", 1)),
        "seed": int(config.get("seed", 0)),
        "enforce_eager": bool(config.get("enforce_eager", False)),
    } | ({"gpu_memory_utilization": float(config["gpu_memory_utilization"])} if "gpu_memory_utilization" in config else {})


# -- TensorRT-LLM (gpu-trtllm profile) ------------------------------------------------------

def convert_checkpoint_script(profile: Profile) -> Path:
    """``examples/llama/convert_checkpoint.py`` of the TensorRT-LLM v0.17.0 sources (the Dockerfile
    clones them; the folder moved to examples/models/core/llama in later releases)."""
    return profile.path("trtllm_examples_dir") / "llama" / "convert_checkpoint.py"


def trtllm_build_commands(profile: Profile) -> list[list[str]]:
    """``convert_checkpoint.py`` then ``trtllm-build``, as in TensorRT-LLM's Llama guide.

    Flags (each one shown passed at tensorrtllm_backend@v0.17.0, whose submodule is TensorRT-LLM 0.17.0:
    tests/unit/engine/data/trtllm_v0.17.0_flags.toml): examples/llama/convert_checkpoint.py (``--model_dir``,
    ``--output_dir``, ``--dtype``, ``--tp_size``, ``--pp_size``) and
    TensorRT-LLM@v0.17.0:tensorrt_llm/commands/build.py, the ``trtllm-build`` entry point
    (``--checkpoint_dir``, ``--output_dir``, ``--gemm_plugin`` with its ``auto`` choice,
    ``--max_batch_size``, ``--max_input_len``, ``--max_seq_len``); the same pair of commands as
    tensorrtllm_backend@v0.17.0:docs/llama.md.
    """
    s = engine_settings(profile)
    convert = [
        "python3", str(convert_checkpoint_script(profile)),
        "--model_dir", s["model_dir"],
        "--output_dir", s["checkpoint_dir"],
        "--dtype", s["dtype"],
        "--tp_size", str(s["tp_size"]),
        "--pp_size", str(s["pp_size"]),
    ]
    build = [
        "trtllm-build",
        "--checkpoint_dir", s["checkpoint_dir"],
        "--output_dir", s["engine_dir"],
        "--gemm_plugin", s["gemm_plugin"],
        "--max_batch_size", str(s["max_batch_size"]),
        "--max_input_len", str(s["max_input_len"]),
        "--max_seq_len", str(s["max_seq_len"]),
    ]
    return [convert, build]


def tensorrt_llm_available() -> bool:
    return importlib.util.find_spec("tensorrt_llm") is not None


def build_engine(profile: Profile, dry_run: bool = False) -> dict[str, Any]:
    """Prepare the profile's engine; returns what was done (config path, commands)."""
    result: dict[str, Any] = {"profile": profile.name, "engine": profile.engine}
    if profile.engine == "tensorrt_llm":
        commands = trtllm_build_commands(profile)
        result["commands"] = [shlex.join(c) for c in commands]
        if not dry_run:
            if not tensorrt_llm_available():
                raise EngineConfigError(
                    "tensorrt_llm is not importable here: build the gpu-trtllm engine inside the NGC "
                    "container (docker build -t llm-tutorial-gpu . && docker run --gpus all ...), "
                    "or run this notebook with PROFILE='cpu'"
                )
            model_dir = profile.path("model_dir")
            if not (model_dir / "config.json").is_file():
                raise EngineConfigError(f"no Hugging Face checkpoint at {model_dir}: run notebook 00 first")
            script = convert_checkpoint_script(profile)
            if not script.is_file():
                raise EngineConfigError(
                    f"{script} is missing: the NGC image has no TensorRT-LLM examples. Build the project's "
                    "Dockerfile (it clones TensorRT-LLM v0.17.0 to /opt/src), or clone "
                    "`git clone --depth 1 --branch v0.17.0 https://github.com/NVIDIA/TensorRT-LLM.git` "
                    "and set TRTLLM_EXAMPLES_DIR to its examples folder"
                )
            for cmd in commands:
                subprocess.run(cmd, check=True)
    result["engine_config"] = str(write_engine_config(profile))
    return result


def one_engine_at_a_time(profile: Profile) -> bool:
    """Whether the profile's engines share a real GPU, where each must be ready before the next starts:
    vLLM checks the GPU's free memory as it starts and profiles its own use against it, so another
    engine claiming memory at that moment upsets both (on a CPU or with logical GPUs they start together)."""
    return not profile["logical_gpus"]


def triton_load_args(profile: Profile) -> tuple[str, ...]:
    """Triton flags that load its models one after the other where :func:`one_engine_at_a_time`
    (Triton loads up to four models at once by default: ``--model-load-thread-count``)."""
    return ("--model-load-thread-count=1",) if one_engine_at_a_time(profile) else ()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prepare the engine of a profile")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--dry-run", action="store_true", help="print the build commands only")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(build_engine(load_profile(args.profile), dry_run=args.dry_run), indent=2))
    except (EngineConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
