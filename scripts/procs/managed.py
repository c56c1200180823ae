"""One managed server process: started, polled until ready, stopped by its own handle.

Why it is built this way, and the sources: docs/design/procs.md.
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TypeVar

import requests

from scripts.procs.process_guard import OWNER_GONE_GRACE_S, live_group_members, shm_files_of, start_detached_guard, stop_group

Server = TypeVar("Server", bound="ManagedServer")


class ManagedServer:
    """A server process group this process owns. Subclasses set :attr:`name` and :attr:`start_error`
    and give :meth:`argv` and :attr:`ready_url`; ``log_path`` is where the server's output goes."""

    #: What the messages call the server ("tritonserver", "vllm serve" ...).
    name = "server"
    #: The exception a failed start raises (built from one message).
    start_error: type[Exception] = RuntimeError
    #: Seconds between two readiness polls.
    poll_s = 0.5
    #: Seconds the guard gives the group between SIGTERM and SIGKILL once this process is gone.
    guard_grace_s: float = OWNER_GONE_GRACE_S
    #: A shared-memory prefix the server's ``/dev/shm`` segments start with (removed at stop), if any.
    shm_prefix: str | None = None
    #: Seconds the server itself may take to exit after SIGTERM, on top of :meth:`stop`'s ``grace_s``.
    exit_timeout_s: float = 0

    def __init__(self, log_path: Path | None = None):
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    # -- what a subclass gives ----------------------------------------------------------------------
    def argv(self) -> list[str]:
        raise NotImplementedError

    @property
    def ready_url(self) -> str:
        """The URL that answers 200 once the server is ready."""
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The server's environment (None: this process's)."""
        return None

    @property
    def cwd(self) -> Path | None:
        """The server's working directory (None: this process's)."""
        return None

    def check_starting(self) -> None:
        """Called on every poll while the server is not ready yet: raise to give up at once."""

    def before_stop(self) -> None:
        """Called before the SIGTERM of a running server."""

    # -- the handle ---------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self: Server, timeout_s: float = 60) -> Server:
        """Start and wait until ready (see :meth:`launch`)."""
        self.launch(timeout_s)
        return self

    def launch(self, timeout_s: float) -> float:
        """Start the server in its own process group with the guard inside it and wait until it is
        ready; the seconds that took. On any failure what was started is stopped and the error raised."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        log = open(self.log_path, "wb")
        try:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self.environment(), cwd=self.cwd, process_group=0)
            atexit.register(self.stop)  # a script or kernel that dies before its teardown still stops the server
            # It detaches: a Ray worker that exits kills its children, and the guard must outlive it.
            try:
                start_detached_guard(self.process.pid, log, self.guard_grace_s, self.shm_prefix)
            except RuntimeError as exc:
                raise self.start_error(f"{exc}; {self.log_name()}") from None
            log.close()
            self.wait_ready(timeout_s, started)
        except BaseException:
            log.close()
            self.stop()
            raise
        return time.monotonic() - started

    def log_name(self) -> str:
        """How the messages point at the log."""
        return f"log {self.log_path}"

    def log_tail(self, lines: int = 40) -> str:
        """The log's last ``lines`` lines ("(no log)" when there is none)."""
        try:
            return self.read_tail(lines)
        except FileNotFoundError:
            return "(no log)"

    def read_tail(self, lines: int) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def is_ready(self) -> bool:
        try:
            return requests.get(self.ready_url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, timeout_s: float = 60, since: float | None = None) -> float:
        """Poll until ready; the seconds since ``since`` (now by default). The subclass's error, with
        the log's tail, when the server exits first or is not ready within ``timeout_s``."""
        start = time.monotonic() if since is None else since
        while time.monotonic() - start < timeout_s:
            if self.process.poll() is not None:
                raise self.start_error(f"{self.name} exited with status {self.process.returncode} before it was "
                                       f"ready; {self.log_name()}:\n{self.log_tail()}")
            if self.is_ready():
                return time.monotonic() - start
            self.check_starting()
            time.sleep(self.poll_s)
        raise self.start_error(f"{self.name} was not ready after {timeout_s:.0f} s; {self.log_name()}:\n{self.log_tail()}")

    def group_members(self) -> list[int]:
        """Live (non-zombie) processes of the server's process group, the guard among them."""
        return live_group_members(self.process.pid) if self.process else []

    def stop(self, grace_s: float = 10) -> None:
        """SIGTERM the group, wait up to the server's exit timeout plus ``grace_s``, then SIGKILL what
        is left and remove the ``/dev/shm`` files the group used. Nothing to do when it never started."""
        if self.process is None:
            return
        atexit.unregister(self.stop)
        pgid = self.process.pid
        shm_seen = shm_files_of(self.group_members())  # what the group maps now: it may be gone after the SIGTERM
        if self.process.poll() is None:
            self.before_stop()
            os.killpg(pgid, signal.SIGTERM)
            try:
                self.process.wait(timeout=self.exit_timeout_s + grace_s)
            except subprocess.TimeoutExpired:
                pass
        # The rest of the group (the guard, the server's own children) as the guard would stop it.
        stop_group(pgid, grace_s, self.shm_prefix, shm_seen=shm_seen)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if left := live_group_members(pgid):
            raise RuntimeError(f"processes {left} of {self.name} group {pgid} survived SIGKILL")

    def __enter__(self: Server) -> Server:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
