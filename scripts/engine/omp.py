"""The OpenMP binding vLLM asks of a CPU worker, read back from the environment and applied by hand.

vLLM binds a worker's OpenMP threads through the environment only: around the worker's start it
sets ``OMP_NUM_THREADS`` and ``GOMP_CPU_AFFINITY`` (or ``OMP_PLACES``, or ``KMP_AFFINITY`` for
Intel's runtime), which the OpenMP runtime reads when it is loaded (``vllm/utils/ompmultiprocessing.py``,
``configure_omp_envs``, at 0.32.0). A spawned worker loads the runtime afresh and is bound; a forked
one inherits a runtime loaded before and is not (``scripts.engine.forked_worker`` applies this).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping


def omp_binding(environ: Mapping[str, str]) -> tuple[int | None, set[int] | None]:
    """``(threads, cpus)`` that vLLM's environment asks for; None where it asks nothing."""
    threads = int(environ["OMP_NUM_THREADS"]) if environ.get("OMP_NUM_THREADS") else None
    if value := environ.get("GOMP_CPU_AFFINITY"):        # "0 1 2"
        cpus = value.split()
    elif value := environ.get("OMP_PLACES"):             # "{0,1,2}"
        cpus = value.strip("{}").split(",")
    elif match := re.search(r"proclist=\[([\d,]+)\]", environ.get("KMP_AFFINITY", "")):  # "...,proclist=[0,1]"
        cpus = match.group(1).split(",")
    else:
        cpus = None
    return threads, ({int(c) for c in cpus} if cpus else None)


def bind_like_a_spawned_worker(environ: Mapping[str, str] = os.environ) -> tuple[int | None, set[int] | None]:
    """Confine this thread (and the OpenMP threads it will start) to vLLM's CPUs, with its thread count."""
    import torch  # noqa: PLC0415

    threads, cpus = omp_binding(environ)
    if cpus:
        os.sched_setaffinity(0, cpus)
    if threads:
        torch.set_num_threads(threads)
    return threads, cpus
