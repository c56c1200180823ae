"""Which tritonservers crashed, for a test run's failure report.

A crashed server shows up in a test as "connection refused" or a notebook cell's
``InferenceServerException: UNAVAILABLE``, which says nothing about why. Two places know more:
the :class:`~scripts.triton.server.TritonServer` objects of this process (their exit status), and
the logs under ``<build>/triton/logs`` of the servers that other processes started (a notebook's
kernel under nbval): Triton logs ``Signal (N) received.`` when a signal reaches it, 15 (SIGTERM)
and 2 (SIGINT) on a normal stop, 11 (SIGSEGV) or 6 (SIGABRT) when it crashes.
"""
from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

from scripts.paths import triton_log_dir

#: The line Triton's signal handler writes (server/src/main.cc), and the signals of a normal stop.
SIGNAL_LINE = re.compile(r"^Signal \((\d+)\) received\.", re.MULTILINE)
STOP_SIGNALS = {int(signal.SIGTERM), int(signal.SIGINT)}


def crash_signal(log: Path) -> int | None:
    """The first signal other than a stop that the log says reached tritonserver, or None."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return None
    for match in SIGNAL_LINE.finditer(text):
        if int(match.group(1)) not in STOP_SIGNALS:
            return int(match.group(1))
    return None


def log_tail(log: Path, lines: int = 40) -> str:
    """The log's last ``lines`` lines, Triton's tables left out (``TritonServer.log_tail`` says why)."""
    text = log.read_text(errors="replace").splitlines()
    return "\n".join([line for line in text if not line.startswith(("+-", "| "))][-lines:])


def crashed_logs(log_dir: Path, since: float) -> list[Path]:
    """The logs in ``log_dir`` written since ``since`` (a ``time.time()``) that record a crash."""
    if not log_dir.is_dir():
        return []
    return sorted(log for log in log_dir.glob("tritonserver-*.log")
                  if log.stat().st_mtime >= since and crash_signal(log) is not None)


def crash_reports(since: float, seen: set[str]) -> list[str]:
    """A report for every crash not in ``seen`` (which it extends): this process's crashed servers,
    then the crash logs in the current build directory written since ``since``."""
    reports = []
    server_module = sys.modules.get("scripts.triton.server")  # imported only where servers were made
    for server in list(server_module.TritonServer.started) if server_module else []:
        if server.crashed() and str(server.log_path) not in seen:
            seen.add(str(server.log_path))
            reports.append(server.crash_report())
    for log in crashed_logs(triton_log_dir(), since):
        if str(log) not in seen:
            seen.add(str(log))
            reports.append(f"tritonserver received {signal.Signals(crash_signal(log)).name}; log {log}:\n{log_tail(log)}")
    return reports


#: What every Python model of the repository writes to the server's log when its initialize() has
#: returned (``request_handling.log_initialized``; the time is ``time.time()``): the engine backends
#: (``vllm backend: ...``) and preprocessing, postprocessing and BLS (``python model: ...``). Triton then
#: logs ``successfully loaded 'NAME'`` once the stub's answer reaches it.
INITIALIZED_LINE = re.compile(r"^[\w ]+: initialize\(\) of '([^']+)' returned at ([\d.]+)$", re.MULTILINE)


def stalled_loads(text: str, now: float, after_s: float) -> list[str]:
    """Models whose initialize() returned more than ``after_s`` before ``now`` and that Triton has
    neither loaded nor failed since. Seen with Triton 2.51's Python backend on two cores under heavy
    load: the stub's answer never reaches the server (the same family of failure as its
    ``boost::interprocess::lock_exception`` abort), and the load waits forever."""
    last: dict[str, tuple[float, int]] = {}  # each model's latest line: a model of several instances
    for match in INITIALIZED_LINE.finditer(text):  # is loaded once the last of them has initialized
        last[match.group(1)] = (float(match.group(2)), match.end())
    return [name for name, (at, end) in last.items() if now - at > after_s
            and f"successfully loaded '{name}'" not in text[end:] and f"failed to load '{name}'" not in text[end:]]
