"""Stop a server's process group when the process that owns it dies without stopping it.

The Triton launcher starts ``tritonserver`` in a process group of its own, so that stopping it
reaches the Python-backend stubs and the vLLM engine processes they spawn. Its owner stops that
group on ``stop()`` and at interpreter exit. An owner that is killed outright (a Serve replica
whose worker Ray kills, a notebook kernel killed with SIGKILL) runs neither, and the engine
processes live on as orphans holding gigabytes of memory. This guard, started by the launcher
inside the server's group, watches the owner. When the owner is gone, it sends the group SIGTERM,
waits ``--grace`` seconds, kills what is left, and removes the server's shared-memory segments.
When the group is stopped normally, the guard gets the same SIGTERM and exits.

    python -m scripts.triton.process_guard --owner PID --group PGID [--grace 15] [--shm-prefix P]
"""
from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` (``R``, ``S``, ``Z`` ...), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has exited; it only waits to be reaped)."""
    return process_state(pid) not in (None, "Z")


def live_group_members(pgid: int) -> list[int]:
    """PIDs whose process group is ``pgid``, zombies excluded (they are gone, only not yet reaped)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return sorted(members)


def still_running(pids: list[int], timeout_s: float = 10.0, poll_s: float = 0.2) -> list[int]:
    """Those of ``pids`` still running (zombies count as gone) after waiting up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if is_running(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(poll_s)


def shm_segments(*prefixes: str) -> list[Path]:
    """The ``/dev/shm`` entries whose names start with any of ``prefixes`` (a server's shared memory)."""
    return sorted(p for p in Path("/dev/shm").iterdir() if any(prefix and p.name.startswith(prefix) for prefix in prefixes))


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def stop_group(pgid: int, grace_s: float, shm_prefix: str | None = None, poll_s: float = 0.2) -> list[int]:
    """SIGTERM the group but this process, wait up to ``grace_s``, SIGKILL what is left, remove
    the ``shm_prefix`` segments; returns the PIDs that had to be killed."""
    me = os.getpid()
    others = [p for p in live_group_members(pgid) if p != me]
    _signal_all(others, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while others and time.monotonic() < deadline:
        time.sleep(poll_s)
        others = [p for p in live_group_members(pgid) if p != me]
    _signal_all(others, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while [p for p in others if is_running(p)] and time.monotonic() < deadline:  # SIGKILL is not instant
        time.sleep(poll_s)
    if shm_prefix:
        for segment in shm_segments(shm_prefix):
            segment.unlink(missing_ok=True)
    return others


def guard(owner: int, pgid: int, grace_s: float, shm_prefix: str | None = None, poll_s: float = 0.5) -> str:
    """Watch until the group is gone (``"group gone"``) or the owner is (then stop the group)."""
    while True:
        if not [p for p in live_group_members(pgid) if p != os.getpid()]:
            return "group gone"
        if not is_running(owner):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM must not stop the guard
            stop_group(pgid, grace_s, shm_prefix)
            return "owner gone"
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--grace", type=float, default=15)
    parser.add_argument("--shm-prefix")
    args = parser.parse_args(argv)
    guard(args.owner, args.group, args.grace, args.shm_prefix)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
