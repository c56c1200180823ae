"""What ``nvidia-smi`` says about the GPUs, once or sampled through a run.

Triton exports GPU metrics (``nv_gpu_utilization``, ``nv_gpu_memory_used_bytes``) only where it was
built with them and finds DCGM; :class:`GpuSampler` measures the same two quantities from outside, so a
benchmark has them whichever server runs::

    with GpuSampler(interval_s=1.0) as sampler:
        ...                          # the load
    sampler.rows                     # [{"t": ..., "index": 0, "utilization_pct": 87.0, "memory_used_bytes": ...}]
"""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from scripts.procs.process_guard import live_group_members

#: Triton's GPU metrics, as the shipped Grafana dashboard's GPU row queries them.
TRITON_GPU_METRICS = ("nv_gpu_utilization", "nv_gpu_memory_used_bytes")


def nvidia_smi(query: str, what: str = "gpu", timeout_s: float = 30) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-{what}={query}`` (CSV without header or units), cells stripped."""
    if shutil.which("nvidia-smi") is None:
        raise FileNotFoundError("nvidia-smi is not on PATH: install the NVIDIA driver, which ships it")
    out = subprocess.run(["nvidia-smi", f"--query-{what}={query}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


def gpu_activity() -> list[dict[str, Any]]:
    """Every GPU now: index, utilization in percent, memory used and total in bytes."""
    return [{"index": int(i), "utilization_pct": float(util), "memory_used_bytes": int(used) * 2**20,
             "memory_total_bytes": int(total) * 2**20}
            for i, util, used, total in nvidia_smi("index,utilization.gpu,memory.used,memory.total")]


def memory_by_pid() -> dict[int, int]:
    """GPU memory (bytes) of each process using a GPU (``nvidia-smi --query-compute-apps``)."""
    return {int(pid): int(used) * 2**20 for pid, used in nvidia_smi("pid,used_memory", "compute-apps")
            if pid.isdigit() and used.isdigit()}


def memory_of(pids: Callable[[], Iterable[int]], count: int, timeout_s: float = 90, poll_s: float = 1, settle: int = 3,
              measure: Callable[[], dict[int, int]] = memory_by_pid) -> list[int]:
    """GPU memory (bytes, sorted) of the processes among ``pids()`` that hold some, once at least ``count`` of them
    do and the same ones have for ``settle`` looks in a row (an engine being unloaded holds its memory a moment
    longer; an engine may run in a child process of the one that loaded it); TimeoutError with what was seen."""
    deadline = time.monotonic() + timeout_s
    last, same, foreign = None, 0, 0
    while True:
        mine = set(pids())
        measured = measure()
        held = {pid: b for pid, b in measured.items() if pid in mine}
        # nvidia-smi lists the host's PIDs whatever PID namespace asks (NVIDIA/nvidia-docker#1483): in a container
        # without --pid=host none of them is a process here, and no wait would ever see one of ours.
        foreign = foreign + 1 if measured and not any(psutil.pid_exists(pid) for pid in measured) else 0
        if foreign >= settle:
            raise RuntimeError(f"nvidia-smi lists processes holding GPU memory (PIDs {sorted(measured)}) but none of them "
                               "exists here: this runs in a PID namespace of its own (a container); start the container "
                               "with --pid=host (docs/run-on-your-gpu.md) so that the PIDs are the ones it sees")
        same = same + 1 if last is not None and set(held) == set(last) else 1
        last = held
        if len(held) >= count and same >= settle:
            return sorted(held.values())
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(held)} processes hold GPU memory ({[round(b / 2**30, 1) for b in held.values()]} "
                               f"GiB), expected {count} or more, steady for {settle} looks; gave up after {timeout_s:g} s")
        time.sleep(poll_s)


def group_memory(pgid: int, timeout_s: float = 90, measure: Callable[[], dict[int, int]] = memory_by_pid) -> int:
    """GPU memory (bytes) that the live processes of process group ``pgid`` hold together, once steady: a
    managed Triton's group is tritonserver with its stubs and engines."""
    return sum(memory_of(lambda: live_group_members(pgid), 1, timeout_s=timeout_s, measure=measure))


def exports_gpu_metrics(metrics_text: str) -> bool:
    """Whether a Triton ``/metrics`` page carries its GPU metrics (a build with them, DCGM found)."""
    return all(f"\n{name}{{" in f"\n{metrics_text}" for name in TRITON_GPU_METRICS)


def triton_gpu_metrics(metrics_url: str) -> bool:
    """Whether the Triton at ``metrics_url`` (its ``/metrics``) exports GPU metrics."""
    import requests  # noqa: PLC0415

    return exports_gpu_metrics(requests.get(metrics_url, timeout=10).text)


def sampler_for(profile) -> tuple["GpuSampler | None", str]:
    """A started :class:`GpuSampler` where ``profile`` runs on real GPUs that ``nvidia-smi`` lists,
    with a line saying so; else None and the reason."""
    if profile["logical_gpus"]:
        return None, f"profile {profile.name!r} has no real GPU to sample"
    try:
        sampler = GpuSampler().start()
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"no GPU to sample: {exc}"
    return sampler, f"nvidia-smi sampled every {sampler.interval_s:g} s"


def plot_activity(rows: list[dict[str, Any]], start: float, marks: dict[str, float] | None = None):
    """Utilization (percent) and memory used (GiB) of each GPU over the sampled run, as two plots side
    by side; ``marks``: ``{label: time}`` drawn as dotted lines. Returns the figure."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (util, mem) = plt.subplots(1, 2, figsize=(10, 2.6), dpi=72)  # a PNG under 150 KB (CONTRIBUTING.md)
    for index in sorted({r["index"] for r in rows}):
        mine = [r for r in rows if r["index"] == index]
        t = [r["t"] - start for r in mine]
        util.plot(t, [r["utilization_pct"] for r in mine], label=f"GPU {index}", linewidth=1, antialiased=False)
        mem.plot(t, [r["memory_used_bytes"] / 2**30 for r in mine], label=f"GPU {index}", linewidth=1, antialiased=False)
    for ax, title in ((util, "GPU utilization (%), nvidia-smi"), (mem, "GPU memory used (GiB), nvidia-smi")):
        for when in (marks or {}).values():
            ax.axvline(when - start, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


class GpuSampler:
    """``nvidia-smi`` every ``interval_s`` on a daemon thread between :meth:`start` and :meth:`stop`;
    :attr:`rows` holds one dict per GPU and sample (``t``: seconds since the epoch)."""

    def __init__(self, interval_s: float = 1.0):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.rows: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "GpuSampler":
        gpu_activity()  # fails now, with the reason, where there is no nvidia-smi
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            try:
                self.rows += [{"t": now, **gpu} for gpu in gpu_activity()]
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval_s)

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 35)
            self._thread = None
        return self.rows

    def peak(self) -> dict[int, dict[str, float]]:
        """Per GPU index: the highest utilization (percent) and memory used (bytes) sampled."""
        out: dict[int, dict[str, float]] = {}
        for row in self.rows:
            gpu = out.setdefault(row["index"], {"utilization_pct": 0.0, "memory_used_bytes": 0})
            gpu["utilization_pct"] = max(gpu["utilization_pct"], row["utilization_pct"])
            gpu["memory_used_bytes"] = max(gpu["memory_used_bytes"], row["memory_used_bytes"])
        return out

    def __enter__(self) -> "GpuSampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
