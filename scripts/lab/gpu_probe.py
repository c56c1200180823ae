"""What a Serve replica sees of the GPUs, and GPU memory claimed the way an engine claims it.

Why it is built this way, and the sources: docs/design/lab.md.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ray import serve

from scripts.lab.ok_app import PENDING_DELETE_S

POLICIES = ("of_free", "of_total")


def visibility() -> dict[str, Any]:
    """Where this process runs and which GPUs it can use: the Ray node, the GPU ids Ray assigned,
    ``CUDA_VISIBLE_DEVICES`` (None when unset) and what CUDA (through torch) shows."""
    import ray  # noqa: PLC0415
    import torch  # noqa: PLC0415 - heavy

    available = torch.cuda.is_available()
    devices = []
    if available:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append({"name": props.name, "uuid": f"GPU-{props.uuid}"})
    return {"node_id": ray.get_runtime_context().get_node_id(), "ray_gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "cuda_available": available,
            "devices": devices}


def claim_engine_memory(policy: str, fraction: float, engine_bytes: int, *, device: int = 0,
                        keep: list | None = None) -> dict[str, int]:
    """Allocate GPU memory as an engine does at start-up; the tensors go into ``keep`` (the caller
    holds them). ``of_free``: ``engine_bytes`` (weights and runtime buffers), then ``fraction`` of
    the memory free after that for the KV cache. ``of_total``: ``fraction`` of the GPU's total
    memory, all of it at once. A claim that does not fit raises ``torch.OutOfMemoryError``, CUDA's own.
    """
    import torch  # noqa: PLC0415

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be within (0, 1), got {fraction!r}")
    if policy == "of_free" and engine_bytes < 0:
        raise ValueError(f"engine_bytes must be 0 or more, got {engine_bytes!r}")
    keep = [] if keep is None else keep
    free_before, total = torch.cuda.mem_get_info(device)

    def take(nbytes: int) -> None:
        if nbytes > 0:
            keep.append(torch.empty(int(nbytes), dtype=torch.uint8, device=f"cuda:{device}"))

    if policy == "of_total":
        take(int(fraction * total))
        kv = 0
    else:
        take(engine_bytes)
        free_after_engine, _ = torch.cuda.mem_get_info(device)
        kv = int(fraction * free_after_engine)
        take(kv)
    free_after, _ = torch.cuda.mem_get_info(device)
    return {"total_bytes": int(total), "free_before": int(free_before), "free_after": int(free_after),
            "held_bytes": int(free_before - free_after), "kv_cache_bytes": kv}


@serve.deployment(graceful_shutdown_timeout_s=PENDING_DELETE_S)  # see scripts.lab.ok_app
class GpuProbe:
    """Reports :func:`visibility`; with ``claim`` (keyword arguments of :func:`claim_engine_memory`)
    each replica first holds that much GPU memory, and its constructor fails with CUDA's
    out-of-memory error when the claim does not fit. With ``triton_repo`` each replica starts Triton
    on that model repository and reports whether it loaded (then stops it)."""

    def __init__(self, claim: dict[str, Any] | None = None, triton_repo: str | None = None):
        self._tensors: list = []
        self.claimed = claim_engine_memory(**claim, keep=self._tensors) if claim else None
        self.triton = None
        if triton_repo:  # start Triton on the repository, as the tutorial's replicas do; say how it went
            from scripts.lab.gpu_conflicts import load_triton  # noqa: PLC0415

            self.triton = load_triton(Path(triton_repo), measure=None).format()

    def report(self) -> dict[str, Any]:
        return visibility() | {"claimed": self.claimed, "triton": self.triton,
                               "replica": serve.get_replica_context().replica_id.unique_id}

    def __call__(self, request) -> dict[str, Any]:
        return self.report()
