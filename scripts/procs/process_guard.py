"""Stop a server's process group when the process that owns it dies without stopping it.

Why it is built this way, and the sources: docs/design/procs.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Seconds the guard gives a server's group between SIGTERM and SIGKILL once its owner is dead: nobody is
#: left to read an answer, and everything must be gone within seconds (tests/unit/procs).
OWNER_GONE_GRACE_S = 2


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


def engine_processes(pgid: int, title_prefix: str = "VLLM::") -> list[tuple[int, str, str]]:
    """``(pid, title, executable)`` of a group's processes whose title starts with ``title_prefix``:
    vLLM names its engine processes ``VLLM::EngineCore`` and ``VLLM::Worker`` (setproctitle). The
    executable tells how each was started: a fresh interpreter (spawn) runs ``python3``, a fork
    runs whatever its parent ran (a Triton Python-backend stub: ``triton_python_backend_stub``)."""
    found = []
    for pid in live_group_members(pgid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
            executable = os.readlink(f"/proc/{pid}/exe")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if title.startswith(title_prefix):
            found.append((pid, title, executable))
    return found


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


def shm_files_of(pids: list[int]) -> set[Path]:
    """The ``/dev/shm`` files that ``pids`` map or hold open (unlinked ones excluded: nothing to remove)."""
    found: set[Path] = set()
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                fields = line.split(None, 5)  # address perms offset dev inode [pathname]
                name = fields[5] if len(fields) == 6 else ""
                if name.startswith("/dev/shm/") and not name.endswith(" (deleted)"):
                    found.add(Path(name))
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/") and not target.endswith(" (deleted)"):
                    found.add(Path(target))
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


def remove_unused_shm(files: set[Path]) -> list[Path]:
    """Unlink those of ``files`` that no running process maps or holds open; returns the removed ones."""
    candidates = {f for f in files if f.exists()}
    if not candidates:
        return []
    others = [int(d.name) for d in Path("/proc").glob("[0-9]*") if is_running(int(d.name))]
    removable = sorted(candidates - shm_files_of(others))
    for path in removable:
        path.unlink(missing_ok=True)
    return removable


def rpc_dir(prefix: str) -> Path:
    """The folder a server's vLLM engines bind their ZeroMQ IPC sockets in (``VLLM_RPC_BASE_PATH``,
    ``get_open_zmq_ipc_path`` in ``vllm/utils/network_utils.py`` at 0.32.0; by default the temp folder
    itself, where every engine that does not close its sockets leaves its socket files behind)."""
    return Path(tempfile.gettempdir()) / f"{prefix}vllm-rpc"


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def stop_group(pgid: int, grace_s: float, shm_prefix: str | None = None, poll_s: float = 0.2,
               shm_seen: set[Path] | None = None) -> list[int]:
    """SIGTERM the group but this process, wait up to ``grace_s``, SIGKILL what is left, then remove
    the ``shm_prefix`` segments and the ``/dev/shm`` files the group used (``shm_seen`` and what its
    processes map now) that nothing else uses, and the prefix's :func:`rpc_dir`; returns the PIDs
    that had to be killed."""
    me = os.getpid()
    others = [p for p in live_group_members(pgid) if p != me]
    shm_seen = set(shm_seen or ()) | shm_files_of(others)
    _signal_all(others, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while others and time.monotonic() < deadline:
        time.sleep(poll_s)
        others = [p for p in live_group_members(pgid) if p != me]
    shm_seen |= shm_files_of(others)
    _signal_all(others, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while [p for p in others if is_running(p)] and time.monotonic() < deadline:  # SIGKILL is not instant
        time.sleep(poll_s)
    remove_unused_shm(shm_seen | set(shm_segments(shm_prefix)) if shm_prefix else shm_seen)
    if shm_prefix:
        shutil.rmtree(rpc_dir(shm_prefix), ignore_errors=True)
    return others


def guard(owner: int, pgid: int, grace_s: float, shm_prefix: str | None = None, poll_s: float = 0.5,
          shm_every_s: float = 2.0) -> str:
    """Watch until the group is gone (``"group gone"``) or the owner is (then stop the group).

    Every ``shm_every_s`` it notes the ``/dev/shm`` files the group uses, so that files made and
    mapped by a process that has since died are removed too: at once, when no running process maps
    or holds one any more (a vLLM engine that ends before it closes its ``psm_*`` queues leaves them
    behind, and an owner's ``stop()`` that comes later no longer sees who had mapped them), and with
    the rest when the owner goes. Each file is named on stdout (the server's log) when first noted."""
    shm_seen: set[Path] = set()
    next_scan = 0.0
    while True:
        members = [p for p in live_group_members(pgid) if p != os.getpid()]
        if not members:
            return "group gone"
        if not is_running(owner):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM must not stop the guard
            stop_group(pgid, grace_s, shm_prefix, shm_seen=shm_seen)
            return "owner gone"
        if time.monotonic() >= next_scan:
            used = shm_files_of(members)
            for path in sorted(used - shm_seen):  # in the log: what the guard will remove, and when it knew
                print(f"process guard: watching {path} (mapped or held by group {pgid})", flush=True)
            if left := {f for f in shm_seen - used if f.exists()}:  # their processes ended: used elsewhere?
                shm_seen -= set(remove_unused_shm(left))
            shm_seen = {f for f in shm_seen if f.exists()} | used
            next_scan = time.monotonic() + shm_every_s
        time.sleep(poll_s)


def start_detached_guard(group: int, log, grace_s: float, shm_prefix: str | None = None, timeout_s: float = 30) -> None:
    """Start this guard for the process group ``group`` with this process as its owner: inside that
    group, detached (see above), its output appended to ``log`` (a file object or None). Raises
    RuntimeError when it did not start."""
    args = [sys.executable, "-m", "scripts.procs.process_guard", "--owner", str(os.getpid()), "--group", str(group),
            "--grace", str(grace_s), "--detach"] + (["--shm-prefix", shm_prefix] if shm_prefix else [])
    starter = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, process_group=group,
                               cwd=Path(__file__).resolve().parents[2])
    if starter.wait(timeout=timeout_s) != 0:
        raise RuntimeError(f"the process guard of group {group} did not start (status {starter.returncode})")


def start_guarded(argv: list[str], log, *, env: dict[str, str], cwd: Path, grace_s: float) -> subprocess.Popen:
    """Start ``argv`` in a process group of its own, its output to ``log``, with the detached guard
    inside the group: whatever the command spawns goes when this process dies, even by SIGKILL. If
    the guard does not start, the group is killed and the error raised."""
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, process_group=0)
    try:
        start_detached_guard(process.pid, log, grace_s)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process


def run_guarded(argv: list[str], log_path: Path, *, env: dict[str, str], cwd: Path, grace_s: float,
                timeout_s: float) -> int:
    """Run ``argv`` to its end as :func:`start_guarded` starts it, its output to ``log_path``; past
    ``timeout_s`` it is killed. Nothing of its group outlives the call (``/dev/shm`` files included).
    Returns its exit status (``-SIGKILL`` when it ran past ``timeout_s``)."""
    with open(log_path, "wb") as log:
        proc = start_guarded(argv, log, env=env, cwd=cwd, grace_s=grace_s)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            shm_seen = shm_files_of(live_group_members(proc.pid))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            stop_group(proc.pid, 2, shm_seen=shm_seen)  # the guard, and anything the command left in the group
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--grace", type=float, default=OWNER_GONE_GRACE_S,
                        help="seconds between SIGTERM and SIGKILL once the owner is gone")
    parser.add_argument("--shm-prefix")
    parser.add_argument("--detach", action="store_true", help="fork and let the first process exit (not the owner's child)")
    args = parser.parse_args(argv)
    if args.detach and os.fork():
        os._exit(0)  # the starter sees this exit; the guard lives on, re-parented, in the same group
    guard(args.owner, args.group, args.grace, args.shm_prefix)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
