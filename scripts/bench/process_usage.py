"""What the processes of the serving stack use: CPU seconds per process group between marks (notebook
07), and resident memory (``make test-full``, before and after a soak).

On a small machine every layer of the serving path competes for the same cores as the engine:
a token that costs the HTTP proxy, the replica and a Python-backend stub a millisecond of CPU each
is a token the engine did not compute. :class:`CpuMeter` reads the CPU time (user + system, from
``/proc`` through psutil) of named process groups, each a set of root PIDs and all their
children, plus the machine's busy time, at each :meth:`CpuMeter.mark`; :meth:`CpuMeter.intervals`
gives the differences. Marked once before a plan and once after each run (the progress line
``run_plan`` echoes), interval ``i`` is run ``i``'s CPU. :func:`rss_table` reads the resident
memory of named processes.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import psutil

#: The label of what the named groups do not account for (the load generator, the OS, Ray's own daemons).
REST = "rest of the machine"


def tree_cpu_seconds(roots: Iterable[int]) -> float:
    """User + system CPU seconds of ``roots`` and all their live descendants (each process once)."""
    seen: set[int] = set()
    total = 0.0
    for root in roots:
        try:
            parent = psutil.Process(root)
            family = [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
    return total


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (all cores) since boot."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


class CpuMeter:
    """CPU seconds of named process groups between marks.

    ``groups`` maps a label to the root PIDs of a group, or to a function returning them (called at
    each mark, for groups whose processes come and go). Descendants count with their root: a
    Triton's stubs and vLLM's engine processes with ``tritonserver``.
    """

    def __init__(self, groups: Mapping[str, Iterable[int] | Callable[[], Iterable[int]]]):
        self.groups = dict(groups)
        self.marks: list[dict[str, float]] = []

    def mark(self, *_ignored: Any) -> None:
        """Record the groups' and the machine's CPU seconds now (arguments ignored: usable as a callback)."""
        sample = {"time": time.monotonic(), "machine": machine_busy_seconds()}
        for label, roots in self.groups.items():
            sample[label] = tree_cpu_seconds(roots() if callable(roots) else roots)
        self.marks.append(sample)

    def echo(self, line: str) -> None:
        """Print a progress line and mark (``run_plan(..., echo=meter.echo)``: a mark after each run)."""
        print(line, flush=True)
        self.mark()

    def intervals(self) -> list[dict[str, float]]:
        """One dict per interval between consecutive marks: wall seconds, each group's CPU seconds,
        the machine's busy seconds and what the groups do not account for (:data:`REST`)."""
        out = []
        for before, after in zip(self.marks, self.marks[1:]):
            row = {"wall_s": after["time"] - before["time"], "machine": after["machine"] - before["machine"]}
            for label in self.groups:
                row[label] = max(0.0, after[label] - before[label])
            row[REST] = max(0.0, row["machine"] - sum(row[label] for label in self.groups))
            out.append(row)
        return out


def per_token_ms(interval: Mapping[str, float], tokens: int, labels: Iterable[str]) -> dict[str, float]:
    """CPU milliseconds per output token of each label in ``interval``."""
    if tokens <= 0:
        raise ValueError(f"tokens must be positive, got {tokens}")
    return {label: 1000.0 * interval.get(label, 0.0) / tokens for label in labels}


def attribute(rows: list[dict[str, Any]], intervals: list[dict[str, float]], labels: Iterable[str]) -> list[dict[str, Any]]:
    """Each run's CPU milliseconds per output token by process group, from a meter marked before the
    plan and after each run (``intervals[i]`` is ``rows[i]``'s); runs without tokens are left out."""
    labels = list(labels)
    out = []
    for row, interval in zip(rows, intervals):
        tokens = int(row.get("output_tokens") or 0)
        if tokens > 0:
            out.append({"label": row["label"], "concurrency": row["concurrency"], "repeat": row.get("repeat", 0)}
                       | {k: round(v, 3) for k, v in per_token_ms(interval, tokens, labels).items()})
    return out


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def rss_table(processes: Iterable[tuple[str, int]]) -> dict[str, int]:
    """``{"name (pid)": resident bytes}`` for the (name, pid) pairs given."""
    return {f"{name} ({pid})": rss_bytes(pid) for name, pid in processes}
