"""Notebook 06's engine-memory sections (6 and 9) for vLLM, produced with the real engine.

vLLM sizes its whole footprint (weights, activations, CUDA graphs, KV cache) as ``gpu_memory_utilization``
of the GPU's TOTAL memory, and refuses to start when less than that is free ("Free memory on device ...
is less than desired GPU memory utilization", vllm/v1/worker/utils.py). TensorRT-LLM and transformers
take a share of the memory FREE instead (:mod:`scripts.lab.gpu_conflicts`). So on one GPU:

* two engines at vLLM's default 0.9 (two Serve replicas with ``num_gpus: 0.5``, each with its Triton):
  the second refuses to start; the fix is utilizations that add up to what the GPU holds
  (:func:`safe_utilization`), the engines started one after the other;
* ``instance_group { count: N }`` of one vLLM model at 0.9: Triton's Python backend starts the instances
  together (:mod:`scripts.triton.backends`), so each passes the start-up check on a still-empty GPU. vLLM
  then sizes its KV cache as that share less what its own process uses, and it counts every byte the
  GPU's used memory grew by since it started, beyond its torch tensors, as its own "non-torch memory":
  the memory the other instances take meanwhile too. The instance that profiles first gets the whole
  share, the later ones a KV cache of what is left, or none ("No available memory for the cache blocks").
  Seen on an H200 at 0.9 and count 2 (section 9 of docs/gpu-runs/h200/failed/06_troubleshoot_gpu_resources.ipynb):
  Triton ready, its two engines holding 7.0 and 123.8 GiB. Which instance is starved depends on timing, so no utilization makes N > 1 safe: the fix is count 1 (vLLM batches ``max_num_seqs``
  sequences in one instance). :func:`instances_together` reads each engine's KV cache from Triton's log.

The checker's prediction for each comes from :func:`estimate` (:mod:`scripts.capacity.instance_memory`).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts.capacity.instance_memory import (USABLE_GPU_MEMORY_FRACTION, VLLM_TOGETHER, TritonMemoryEstimate,
                                              triton_instance_memory)
from scripts.capacity.instance_size import FRACTION_OF_FREE_ENGINES, memory_estimate_settings, profile_model_config
from scripts.lab.gpu_conflicts import TritonLoad, engine_only_repository, load_triton, started_triton
from scripts.monitor.gpu import memory_by_pid
from scripts.profiles import Profile


#: Section 9's fix for vLLM, printed by the notebook.
ONE_INSTANCE = ("vLLM: the fix is instance_group count 1. One instance already batches max_num_seqs sequences; "
                + VLLM_TOGETHER)

#: An instance whose KV cache is below this share of the largest one's was starved by the others' start.
STARVED_SHARE = 0.5

# vLLM's engine-core lines in Triton's log (the stub passes them through), e.g.
# "(EngineCore pid=12) INFO 12-06 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,024 tokens": the
# tempered dot keeps a match inside one engine's line when progress bars of several share a line.
_ENGINE_LINE = r"\(EngineCore pid=(\d+)\) INFO (?:(?!\(EngineCore)[^\n])*?"
_KV_TOKENS = re.compile(_ENGINE_LINE + r"GPU KV cache size: ([\d,]+) tokens")
_NON_TORCH = re.compile(_ENGINE_LINE + r"([\d.]+) GiB for non-torch memory")


def reserves_of_total(profile: Profile) -> bool:
    """The profile's engine reserves a share of the GPU's total memory (vLLM), not of the memory free."""
    return profile.engine not in FRACTION_OF_FREE_ENGINES


def estimate(profile: Profile, utilization: float, gpu_bytes: int, instances: int = 1,
             replicas_per_gpu: int = 1) -> TritonMemoryEstimate:
    """The capacity checker's estimate for ``instances`` instances (x ``replicas_per_gpu`` replicas) of the
    profile's vLLM engine, each reserving ``utilization`` of a GPU of ``gpu_bytes``."""
    _require_vllm(profile)
    engine = memory_estimate_settings(profile) | {"gpu_memory_utilization": utilization}
    return triton_instance_memory(engine, instances, gpu_bytes, profile_model_config(profile),
                                  replicas_per_gpu=replicas_per_gpu,
                                  parallel_loading=True)  # a Triton's vLLM instances start together


def safe_utilization(profile: Profile, gpu_bytes: int, engines: int,
                     at_most: float = USABLE_GPU_MEMORY_FRACTION) -> float | None:
    """The largest ``gpu_memory_utilization`` (steps of 0.01, at most ``at_most``) with which ``engines``
    engines of the profile fit one GPU of ``gpu_bytes`` by the estimate; None when none does."""
    for step in range(int(round(at_most * 100)), 0, -1):
        if estimate(profile, step / 100, gpu_bytes, replicas_per_gpu=engines).fits:
            return step / 100
    return None


@dataclass
class SharedGpu:
    """Two engines on one GPU, each in its own Triton, the second started while the first runs."""

    utilization: float
    first: TritonLoad
    second: TritonLoad

    def format(self) -> str:
        return (f"gpu_memory_utilization {self.utilization:g} each\n"
                f"first Triton: {self.first.format()}\nsecond Triton, beside it: {self.second.format()}")


@dataclass
class EngineStart:
    """One vLLM engine's start as its log says it: the KV cache it got, the non-torch memory it counted."""

    pid: int
    kv_tokens: int
    non_torch_gib: float | None = None


def engine_starts(log: str) -> list[EngineStart]:
    """Each vLLM engine's KV cache (tokens) and counted non-torch memory, in the order the log gives them."""
    non_torch = {int(m[1]): float(m[2]) for m in _NON_TORCH.finditer(log)}
    return [EngineStart(int(m[1]), int(m[2].replace(",", "")), non_torch.get(int(m[1])))
            for m in _KV_TOKENS.finditer(log)]


@dataclass
class Instances:
    """``instance_group { count: N }`` of one vLLM model at one utilization: the load, and each engine's start."""

    count: int
    utilization: float
    load: TritonLoad
    engines: list[EngineStart]

    @property
    def starved(self) -> list[EngineStart]:
        """The engines whose KV cache is below :data:`STARVED_SHARE` of the largest one's."""
        largest = max((e.kv_tokens for e in self.engines), default=0)
        return [e for e in self.engines if e.kv_tokens < STARVED_SHARE * largest]

    def format(self) -> str:
        lines = [f"instance_group count {self.count} at gpu_memory_utilization {self.utilization:g}: {self.load.format()}"]
        for e in self.engines:
            counted = f", counting {e.non_torch_gib:.1f} GiB as its own non-torch memory" if e.non_torch_gib else ""
            lines.append(f"  engine pid {e.pid}: KV cache {e.kv_tokens:,} tokens{counted}")
        if self.load.loaded and self.starved:
            lines.append(f"  {len(self.starved)} of {len(self.engines)} engines got less than {STARVED_SHARE:.0%} of the "
                         "largest KV cache: they counted the memory the others took while they profiled as their own")
        return "\n".join(lines)


def instances_together(profile: Profile, out_dir: Path, count: int, utilization: float, timeout_s: float = 300,
                       measure: Callable[[], dict[int, int]] = memory_by_pid) -> Instances:
    """Load ``count`` instances of the profile's vLLM engine at ``utilization`` in one Triton (they start
    together); read each engine's KV cache from the server's log; stop it."""
    _require_vllm(profile)
    repo = engine_only_repository(profile, Path(out_dir), count, utilization=utilization)
    load = load_triton(repo, timeout_s, measure)
    log = load.log_path.read_text(errors="replace") if load.log_path and load.log_path.exists() else ""
    return Instances(count, utilization, load, engine_starts(log))


def two_engines(profile: Profile, out_dir: Path, utilization: float, timeout_s: float = 300,
                measure: Callable[[], dict[int, int]] = memory_by_pid) -> SharedGpu:
    """Start the profile's engine at ``utilization`` in one Triton, then a second Triton with the same engine
    beside it (as two replicas with ``num_gpus: 0.5`` would); both stopped before returning. ``measure``: the GPU
    memory of each process (``nvidia-smi``)."""
    _require_vllm(profile)
    repos = [engine_only_repository(profile, Path(out_dir) / name, 1, utilization=utilization)
             for name in ("first", "second")]
    with started_triton(repos[0], timeout_s, measure) as first:
        second = (load_triton(repos[1], timeout_s, measure) if first.loaded
                  else TritonLoad(False, 0.0, ["not started: the first failed"]))
    return SharedGpu(utilization, first, second)


def _require_vllm(profile: Profile) -> None:
    if not reserves_of_total(profile):
        raise ValueError(f"profile {profile.name!r} runs {profile.engine}, whose KV cache takes a share of the memory "
                         "free: use scripts.capacity.instance_memory.safe_kv_fraction")
