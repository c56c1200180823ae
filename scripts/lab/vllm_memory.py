"""Notebook 06's engine-memory sections (6 and 9) for vLLM, produced with the real engine.

vLLM sizes its whole footprint (weights, activations, CUDA graphs, KV cache) as ``gpu_memory_utilization``
of the GPU's TOTAL memory, and refuses to start when less than that is free ("Free memory on device ...
is less than desired GPU memory utilization", vllm/v1/worker/utils.py). TensorRT-LLM and transformers
take a share of the memory FREE instead (:mod:`scripts.lab.gpu_conflicts`). So on one GPU:

* two engines at vLLM's default 0.9 (two Serve replicas with ``num_gpus: 0.5``, each with its Triton):
  the second refuses to start; the fix is utilizations that add up to what the GPU holds
  (:func:`safe_utilization`), the engines started one after the other;
* ``instance_group { count: N }`` of one vLLM model at 0.9: Triton's Python backend starts the instances
  together (:mod:`scripts.triton.backends`), each passes the start-up check on a still-empty GPU, and
  the later ones fail when the first has taken its share. Instances started together also measure each
  other while vLLM profiles its memory, so no utilization makes N > 1 safe: the fix is count 1 (vLLM
  batches ``max_num_seqs`` sequences in one instance).

The checker's prediction for each comes from :func:`estimate` (:mod:`scripts.capacity.instance_memory`).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts.capacity.instance_memory import (USABLE_GPU_MEMORY_FRACTION, TritonMemoryEstimate,
                                              triton_instance_memory)
from scripts.capacity.instance_size import FRACTION_OF_FREE_ENGINES, memory_estimate_settings
from scripts.lab.gpu_conflicts import TritonLoad, engine_only_repository, load_triton, started_triton
from scripts.monitor.gpu import memory_by_pid
from scripts.profiles import Profile


#: Section 9's fix for vLLM, printed by the notebook.
ONE_INSTANCE = ("vLLM: the fix is instance_group count 1. One instance already batches max_num_seqs sequences; "
                "instances of one model start together, and each measures the whole GPU while the others load, "
                "so no gpu_memory_utilization makes more than one safe")


def reserves_of_total(profile: Profile) -> bool:
    """The profile's engine reserves a share of the GPU's total memory (vLLM), not of the memory free."""
    return profile.engine not in FRACTION_OF_FREE_ENGINES


def estimate(profile: Profile, utilization: float, gpu_bytes: int, instances: int = 1,
             replicas_per_gpu: int = 1) -> TritonMemoryEstimate:
    """The capacity checker's estimate for ``instances`` instances (x ``replicas_per_gpu`` replicas) of the
    profile's vLLM engine, each reserving ``utilization`` of a GPU of ``gpu_bytes``."""
    _require_vllm(profile)
    engine = memory_estimate_settings(profile) | {"gpu_memory_utilization": utilization}
    model = json.loads((profile.path("model_dir") / "config.json").read_text())
    return triton_instance_memory(engine, instances, gpu_bytes, model, replicas_per_gpu=replicas_per_gpu)


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
