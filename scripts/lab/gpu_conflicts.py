"""Notebook 06 on a real GPU: the memory conflicts produced, measured and fixed.

* :func:`gpu_skip_reason`: why the real-GPU cases cannot run here (None when they can);
* :func:`gpu_memory` / :func:`gpu_free_bytes` / :func:`memory_by_pid`: what ``nvidia-smi`` reports (the notebook's kernel never
  touches CUDA itself, so it holds no memory of the GPU it measures);
* :func:`replica_reports`: what every replica of a :class:`scripts.lab.gpu_probe.GpuProbe`
  deployment sees (node, ``CUDA_VISIBLE_DEVICES``, CUDA's devices, the memory it holds);
* :func:`engine_only_repository` and :func:`load_triton`: Triton loading ``instance_group { count: N
  kind: KIND_GPU }`` instances of the profile's engine, each sizing its KV cache from the memory free
  when it starts; the outcome, Triton's own error lines, and the GPU memory each instance holds.
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from scripts.monitor.gpu import memory_by_pid, nvidia_smi
from scripts.profiles import Profile
from scripts.triton.backends import IN_SERVER, IN_STUBS

#: Triton's log lines that say why a model did not load.
_ROOT_CAUSE = re.compile(r"(out of memory|OutOfMemory|Free memory on device|memory for the cache blocks|"
                         r"Error in memory profiling)")
_REASON = re.compile(r"(UNAVAILABLE|failed to load)")
# Triton's informational lines (I1206 ...) and vLLM's (through the stub: "(EngineCore pid=12) INFO 12-06 ...")
_INFO_LINE = re.compile(r"^I\d{4} |\b(INFO|DEBUG) \d\d-\d\d ")
_LOAD_ERROR = re.compile(rf"{_ROOT_CAUSE.pattern}|{_REASON.pattern}|[Ee]rror:|no GPU|GPU.*not|CUDA")


def gpu_skip_reason(profile: Profile, smi: Callable[[], list[dict]] | None = None) -> str | None:
    """Why the real-GPU cases are skipped (the profile declares logical GPUs, or no GPU answers
    ``nvidia-smi``); None when they run."""
    if profile["logical_gpus"]:
        return (f"profile {profile.name!r} schedules against logical GPUs (no GPU memory to claim): the real-GPU "
                "cases run with a GPU profile, e.g. PROFILE=gpu-vllm")
    try:
        gpus = (smi or gpu_memory)()
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"no GPU found ({exc}): install the NVIDIA driver, whose nvidia-smi reports the GPUs"
    return None if gpus else "nvidia-smi lists no GPU"


def gpu_memory() -> list[dict[str, Any]]:
    """Every GPU: index, name, uuid, total and used memory in bytes (``nvidia-smi --query-gpu``)."""
    rows = nvidia_smi("index,name,uuid,memory.total,memory.used", "gpu")
    return [{"index": int(i), "name": name, "uuid": uuid, "total_bytes": int(total) * 2**20,
             "used_bytes": int(used) * 2**20} for i, name, uuid, total, used in rows]


def gpu_free_bytes(index: int = 0) -> int:
    """Memory of GPU ``index`` that no process holds, in bytes (total minus used, by ``nvidia-smi``)."""
    gpu = next((g for g in gpu_memory() if g["index"] == index), None)
    if gpu is None:
        raise ValueError(f"nvidia-smi lists no GPU {index}")
    return gpu["total_bytes"] - gpu["used_bytes"]


def replica_reports(base_url: str, app: str, replicas: int, timeout_s: float = 60, retry_s: float = 0.5) -> list[dict]:
    """The report of each of the ``replicas`` running replicas of ``app``, asked over HTTP through
    Serve's proxy (``GET {base_url}/{app}`` until every replica has answered once; a notebook's kernel
    runs an event loop, in which a deployment handle's blocking ``.result()`` is refused), in a stable
    order: by node, then by replica id.

    A connection closed without a response is asked again: Serve runs a proxy on the head node and on
    every node with replicas, and drains the others. Two Ray nodes on one host (section 7) share the HTTP
    port (Serve's proxies bind it with SO_REUSEPORT), so the kernel can hand a request to the proxy of a
    node that just lost its last replica, which closes the connection; the next one reaches a live proxy."""
    import requests  # noqa: PLC0415

    seen: dict[str, dict] = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < replicas:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(seen)} of {replicas} replicas of {app!r} answered in {timeout_s:g} s")
        try:
            response = requests.get(f"{base_url}/{app}", timeout=timeout_s)
        except requests.ConnectionError:
            time.sleep(retry_s)
            continue
        response.raise_for_status()
        report = response.json()
        seen[report["replica"]] = report
    return sorted(seen.values(), key=lambda r: (r["node_id"], r["replica"]))


def format_visibility(report: dict[str, Any], node_names: dict[str, str]) -> str:
    """One line: where a replica runs and what it sees of the GPUs."""
    devices = ", ".join(f"{d['name']} ({d['uuid']})" for d in report["devices"]) or "none"
    line = (f"node {node_names.get(report['node_id'], report['node_id'][:8])}: "
            f"CUDA_VISIBLE_DEVICES={report['CUDA_VISIBLE_DEVICES']!r}, Ray's GPU ids {report['ray_gpu_ids']}, "
            f"torch.cuda.is_available() {report['cuda_available']}, devices: {devices}")
    if report.get("claimed"):
        line += f"; holds {report['claimed']['held_bytes'] / 2**30:.1f} GiB of GPU memory"
    if report.get("triton"):
        line += f"\n  Triton: {report['triton']}"
    return line


# -- Triton: instance_group count N of the profile's engine ------------------------------------

def engine_only_repository(profile: Profile, out_dir: Path, count: int, fraction: float | None = None,
                           utilization: float | None = None) -> Path:
    """A model repository holding only the profile's engine model with ``instance_group { count:
    count }``. ``fraction``: the KV cache's share of the free memory, where the engine reads it:
    TensorRT-LLM from its ``config.pbtxt`` parameter, transformers from the engine config (a copy of
    it, pointing at the same weights). ``utilization``: vLLM's ``gpu_memory_utilization`` (a share of
    the GPU's total memory), in such a copy of the engine config."""
    from scripts.engine.config import ENGINE_CONFIG, read_engine_config  # noqa: PLC0415
    from scripts.triton.repository.fill import ENGINE_MODEL, RepoSettings, fill_for_profile  # noqa: PLC0415

    if int(count) < 1:
        raise ValueError(f"instance count must be 1 or more, got {count!r}")
    engine_dir = profile.path("engine_dir")
    config = read_engine_config(engine_dir)
    settings = RepoSettings.for_profile(profile, engine_instance_count=int(count))
    if fraction is not None:
        if not 0 < fraction < 1:
            raise ValueError(f"kv_cache_free_gpu_mem_fraction must be within (0, 1), got {fraction!r}")
        settings = replace(settings, kv_cache_free_gpu_mem_fraction=fraction)
        if config["engine"] != "tensorrt_llm":
            engine_dir = Path(out_dir) / "engine"
            engine_dir.mkdir(parents=True, exist_ok=True)
            variant = {k: v for k, v in config.items() if k != "engine_dir"} | {"kv_cache_free_gpu_mem_fraction": fraction}
            (engine_dir / ENGINE_CONFIG).write_text(json.dumps(variant, indent=2) + "\n")
    if utilization is not None:
        if config["engine"] != "vllm":
            raise ValueError(f"utilization is vLLM's gpu_memory_utilization; {config['engine']} takes fraction")
        if not 0 < utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be within (0, 1], got {utilization!r}")
        engine_dir = Path(out_dir) / "engine"
        engine_dir.mkdir(parents=True, exist_ok=True)
        variant = {k: v for k, v in config.items() if k != "engine_dir"} | {"gpu_memory_utilization": utilization}
        (engine_dir / ENGINE_CONFIG).write_text(json.dumps(variant, indent=2) + "\n")
    repo = Path(out_dir) / "repository"
    fill_for_profile(profile, settings, output_dir=repo, engine_dir=engine_dir, models=[ENGINE_MODEL[config["engine"]]])
    return repo


@dataclass
class TritonLoad:
    """How one Triton start went: ready or not, Triton's error lines, the GPU memory of the processes that
    hold the engine's instances (:mod:`scripts.triton.backends`: one stub per instance, or tritonserver's own)."""

    loaded: bool
    seconds: float
    errors: list[str] = field(default_factory=list)
    process_bytes: list[int] = field(default_factory=list)   # per process holding instances, sorted
    instances_in: str = IN_STUBS
    log_path: Path | None = None                              # the server's log (kept after it stopped)

    def format(self) -> str:
        if self.loaded and not self.process_bytes:
            return "Triton ready (the model loaded)"
        if self.loaded and self.instances_in == IN_SERVER:
            return (f"Triton ready: the instances run inside tritonserver's own process, which holds "
                    f"{sum(self.process_bytes) / 2**30:.1f} GiB on the GPU")
        if self.loaded:
            each = ", ".join(f"{b / 2**30:.1f}" for b in self.process_bytes)
            return (f"Triton ready: {len(self.process_bytes)} instance(s) on the GPU holding [{each}] GiB "
                    f"({sum(self.process_bytes) / 2**30:.1f} GiB in all)")
        return "Triton did not load the model:\n" + "\n".join(f"  {line}" for line in self.errors)


def error_lines(log: str, limit: int = 6) -> list[str]:
    """The lines of a Triton log that say why a model did not load (timestamps cut, deduplicated): the
    root causes first (out of memory, vLLM's memory refusals), then the model's other reasons (UNAVAILABLE,
    failed to load), then the last other error line (the server's verdict). Informational lines are
    skipped: Triton's ``I`` lines, and vLLM's ``INFO`` lines, which talk of memory at every start
    ("Free memory on device (138.13/139.8 GiB) on startup ...")."""
    roots: list[str] = []
    reasons: list[str] = []
    others: list[str] = []
    for line in log.splitlines():
        if _INFO_LINE.search(line) or not _LOAD_ERROR.search(line):
            continue
        text = re.sub(r"^[EIW]\d{4} [\d:.]+ \d+ [\w.]+:\d+\] ", "", line.strip())[:400]
        target = roots if _ROOT_CAUSE.search(text) else reasons if _REASON.search(text) else others
        if text not in target:
            target.append(text)
    return (roots + reasons)[:limit - 1 if others else limit] + others[-1:]


def load_triton(repo: Path, timeout_s: float = 300,
                measure: Callable[[], dict[int, int]] | None = memory_by_pid, instances_in: str = IN_STUBS) -> TritonLoad:
    """Start Triton on ``repo``; on success measure the GPU memory of the processes holding the engine's
    instances (``instances_in``: one stub each, or tritonserver's own process; the engine's
    :func:`scripts.triton.backends.engine_backend`), then stop it."""
    with started_triton(repo, timeout_s, measure, instances_in) as load:
        return load


@contextmanager
def started_triton(repo: Path, timeout_s: float = 300, measure: Callable[[], dict[int, int]] | None = memory_by_pid,
                   instances_in: str = IN_STUBS) -> Iterator[TritonLoad]:
    """:func:`load_triton`, with the server kept running inside the ``with`` block (stopped at its end)."""
    if instances_in not in (IN_STUBS, IN_SERVER):
        raise ValueError(f"instances_in must be {IN_STUBS!r} or {IN_SERVER!r}, got {instances_in!r}")
    from scripts.triton.server import TritonServer, TritonStartError  # noqa: PLC0415

    server = TritonServer(repo, exit_timeout_s=5)
    start = time.monotonic()
    try:
        server.start(timeout_s=timeout_s)
    except TritonStartError as exc:
        try:  # the whole log: with many instances the reason lies far above the exception's last lines
            log = server.log_path.read_text(errors="replace")
        except OSError:
            log = str(exc)
        yield TritonLoad(False, time.monotonic() - start, error_lines(log) or str(exc).splitlines()[-3:],
                         log_path=server.log_path)
        return
    try:
        seconds = time.monotonic() - start
        # stubs: one per instance (the server holds only a context); in the server: the server itself
        holders = {server.pid} if instances_in == IN_SERVER else set(server.group_members()) - {server.pid}
        per_pid = measure() if measure else {}
        yield TritonLoad(True, seconds, [], sorted(b for pid, b in per_pid.items() if pid in holders), instances_in,
                         server.log_path)
    finally:
        server.stop()


# -- the notebook's parameters -----------------------------------------------------------------

#: Notebook 06's head node CPUs where NUM_CPUS is not given: room for every section's one-CPU replicas.
HEAD_CPUS = 8


def head_cpus(num_gpus: int) -> int:
    """The head node's logical CPUs for notebook 06 (``NUM_CPUS = None``): :data:`HEAD_CPUS`, or one more than
    its GPUs where it has more (sections 2 and 3 run ``num_gpus + 1`` one-CPU replicas at once: on a host with
    8 GPUs a fixed 8 was refused by :func:`check_parameters`)."""
    return max(HEAD_CPUS, num_gpus + 1)


def check_parameters(*, num_gpus: int, num_cpus: int, instance_count: int, engine_fraction: float,
                     shared_model: str, cpu_node_cpus: int, gpu_memory: str) -> None:
    """Refuse values notebook 06 cannot work with, saying which parameter to change and why.

    ``num_gpus``: the GPUs the head node will have (the logical ones declared, or the real ones).
    Sections 2 and 3 run ``num_gpus + 1`` one-CPU replicas at once, so the head needs that many CPUs.
    """
    from scripts.capacity.units import CapacityConfigError, parse_memory  # noqa: PLC0415
    from scripts.model import configs  # noqa: PLC0415

    def whole(value: Any, name: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be a whole number of at least {minimum}, got {value!r}")
        return value

    gpus = whole(num_gpus, "NUM_GPUS (the head node's GPUs)", 1)
    whole(num_cpus, "NUM_CPUS", 1)
    if num_cpus < gpus + 1:
        raise ValueError(f"NUM_CPUS={num_cpus} is too few for {gpus} GPU(s): sections 2 and 3 run {gpus + 1} replicas "
                         f"of one CPU each at once, so their conflicts would be about CPUs, not GPUs; use NUM_CPUS >= {gpus + 1}")
    whole(instance_count, "INSTANCE_COUNT", 1)
    whole(cpu_node_cpus, "CPU_NODE_CPUS", 1)
    if isinstance(engine_fraction, bool) or not isinstance(engine_fraction, (int, float)) or not 0 < engine_fraction < 1:
        raise ValueError(f"ENGINE_FRACTION must be a number above 0 and below 1 (TensorRT-LLM rejects 1.0), "
                         f"got {engine_fraction!r}")
    model = getattr(configs, str(shared_model), None)
    if not isinstance(model, dict):
        names = sorted(n for n in dir(configs) if n.isupper() and isinstance(getattr(configs, n), dict))
        raise ValueError(f"SHARED_MODEL must name a model of scripts/model/configs.py ({', '.join(names)}), "
                         f"got {shared_model!r}")
    try:
        if parse_memory(gpu_memory, "GPU_MEMORY") <= 0:
            raise ValueError(f"GPU_MEMORY must be more than 0 bytes, got {gpu_memory!r}")
    except CapacityConfigError as exc:
        raise ValueError(str(exc)) from None
