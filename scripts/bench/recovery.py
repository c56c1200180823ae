"""The memory of every process of the stack, before and after a failure (``make test-full``)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable


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
