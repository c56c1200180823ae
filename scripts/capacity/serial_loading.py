"""TensorRT-LLM or transformers instances loading one after another, each KV cache a fraction of the
memory free once its engine has loaded.

TensorRT-LLM's backend creates a model's instances in turn; instance k finds what instances 1 to k-1
left, loads its engine (weights + activations/runtime) if that fits and sizes its KV cache to the
fraction of what is free after it. The first engine that does not fit fails the model. The sources
are in :mod:`scripts.capacity.instance_memory`; instances started together are
:mod:`scripts.capacity.parallel_loading`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceLoad:
    """One TensorRT-LLM/transformers instance loading: it needs ``needs_bytes`` free for its engine, then its KV
    cache takes the fraction of what is free after that."""

    number: int            # 1-based, in load order over every instance on the GPU
    free_before: int
    needs_bytes: int       # weights + activations/runtime
    kv_cache_bytes: int    # 0 when it failed
    loaded: bool

    @property
    def free_after(self) -> int:
        return self.free_before - self.needs_bytes - self.kv_cache_bytes if self.loaded else self.free_before


def load_one_by_one(gpu_bytes: int, needs: int, fraction: float, count: int) -> tuple[InstanceLoad, ...]:
    """Load ``count`` instances in turn until one does not fit (that one is the last returned)."""
    loads, free = [], gpu_bytes
    for number in range(1, count + 1):
        if needs > free:
            loads.append(InstanceLoad(number, free, needs, 0, False))
            break
        kv = int(fraction * (free - needs))  # the KV cache: the fraction of what is free after the engine
        loads.append(InstanceLoad(number, free, needs, kv, True))
        free -= needs + kv
    return tuple(loads)


def safe_fraction(gpu_bytes: int, needs: int, count: int, at_most: float, full_batch: int,
                  reserve: int = 0, slack: float = 0.0) -> float | None:
    """The largest fraction (0.01 steps, <= ``at_most``) with which ``count`` instances all load, each
    KV cache holding a full batch; failing that, the largest with which they all load even with ``reserve``
    bytes taken first and each engine needing ``slack`` more than ``needs``; None: none does.

    The fallback leaves the last instance little beyond its engine (an 80 GB GPU and eight 1B instances:
    about 0.5 GiB at 0.22), so the estimate's own uncertainty must fit in it: memory the server holds once
    (its CUDA context) and an engine's activations and runtime buffers above the estimate. Each instance
    passes the error on to the next, damped by ``1 - fraction``, so a per-engine error costs the last
    instance several times over. Arguments: :func:`scripts.capacity.instance_memory.triton_instance_memory`
    passes the estimate's runtime overhead and activation fraction."""
    loading = []
    for hundredths in range(math.floor(round(at_most * 100, 6)), 0, -1):
        fraction = hundredths / 100
        loads = load_one_by_one(gpu_bytes, needs, fraction, count)
        if all(load.loaded for load in loads):
            if loads[-1].kv_cache_bytes >= full_batch:  # the last instance's KV cache is the smallest
                return fraction
            worse = load_one_by_one(gpu_bytes - reserve, int(needs * (1 + slack)), fraction, count)
            if all(load.loaded for load in worse):
                loading.append(fraction)
    return loading[0] if loading else None
