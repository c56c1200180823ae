"""scripts.procs.managed: the start / wait-ready / stop cycle, on a stand-in server (Python's http.server)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from scripts.procs import managed
from scripts.procs.managed import ManagedServer
from scripts.procs.ports import free_port
from scripts.procs.process_guard import is_running, live_group_members

# Spawns a child that ignores SIGTERM (as multiprocessing's resource tracker does), then serves.
STUBBORN_CHILD = ("import signal, subprocess, sys\n"
                  "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n")


class EchoError(RuntimeError):
    pass


class EchoServer(ManagedServer):
    """``python -m http.server`` on a free port of 127.0.0.1; ``code``: run that instead (it binds nothing)."""

    name = "echo server"
    start_error = EchoError
    poll_s = 0.1

    def __init__(self, folder: Path, code: str | None = None, before_serving: str = ""):
        super().__init__(folder / "logs" / "echo.log")
        self.folder, self.code, self.before_serving = folder, code, before_serving
        self.port = free_port()
        self.checks = 0

    def argv(self) -> list[str]:
        if self.code is not None:
            return [sys.executable, "-c", self.code]
        serve = f"import http.server; http.server.test(http.server.SimpleHTTPRequestHandler, port={self.port}, bind='127.0.0.1')"
        return [sys.executable, "-c", self.before_serving + serve]

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def cwd(self) -> Path:
        return self.folder

    def check_starting(self) -> None:
        self.checks += 1


def gone(server: ManagedServer) -> bool:
    return server.pid is not None and not is_running(server.pid) and live_group_members(server.pid) == []


def test_start_serves_on_loopback_with_the_guard_in_its_group_and_the_context_stops_everything(tmp_path):
    with EchoServer(tmp_path) as server:
        assert server.is_ready() and requests.get(server.ready_url, timeout=5).status_code == 200
        members = server.group_members()
        assert server.pid in members and len(members) == 2  # the server and its guard
        assert server.log_path.is_file()
        assert server.__enter__() is server  # running: not started twice
    assert gone(server)
    server.stop()  # stopped already: nothing to do


def test_a_server_never_started_has_nothing_to_stop(tmp_path):
    server = EchoServer(tmp_path)
    assert server.pid is None and server.group_members() == []
    server.stop()


def test_a_server_that_is_not_ready_in_time_is_stopped_with_a_clear_error(tmp_path):
    server = EchoServer(tmp_path, code="import time; print('still loading', flush=True); time.sleep(60)")
    with pytest.raises(EchoError, match=r"echo server was not ready after 1 s; log .*echo\.log:\n(.|\n)*still loading"):
        server.start(timeout_s=1)
    assert server.checks > 0 and gone(server)


def test_a_server_that_exits_first_reports_its_status_and_log_tail(tmp_path):
    server = EchoServer(tmp_path, code="print('no model here', flush=True); raise SystemExit(3)")
    with pytest.raises(EchoError, match="exited with status 3 before it was ready; log .*:\n(.|\n)*no model here"):
        server.start(timeout_s=30)
    assert gone(server)


def test_check_starting_gives_up_at_once_and_stops(tmp_path):
    class Stalled(EchoServer):
        def check_starting(self):
            raise EchoError("stalled")

    server = Stalled(tmp_path, code="import time; time.sleep(60)")
    started = time.monotonic()
    with pytest.raises(EchoError, match="stalled"):
        server.start(timeout_s=60)
    assert time.monotonic() - started < 30 and gone(server)


def test_a_guard_that_does_not_start_fails_the_start_and_leaves_nothing(tmp_path, monkeypatch):
    def no_guard(group, log, grace_s, shm_prefix=None):
        raise RuntimeError(f"the process guard of group {group} did not start (status 1)")

    monkeypatch.setattr(managed, "start_detached_guard", no_guard)
    server = EchoServer(tmp_path)
    with pytest.raises(EchoError, match=r"guard of group \d+ did not start \(status 1\); log "):
        server.start(timeout_s=30)
    assert gone(server)


def test_stop_ends_its_own_group_only_children_that_ignore_sigterm_included(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with EchoServer(tmp_path / "a") as other:
        server = EchoServer(tmp_path / "b", before_serving=STUBBORN_CHILD).start(timeout_s=30)
        assert len(server.group_members()) == 3  # the server, its stubborn child, the guard
        server.stop(grace_s=1)
        assert gone(server)
        assert other.is_ready() and len(other.group_members()) == 2  # another server's group is left alone
    assert gone(other)


def test_an_owner_killed_outright_leaves_nothing_running(tmp_path):
    """SIGKILL runs no atexit and no __exit__: the guard stops the group."""
    code = ("import os, signal, sys\n"
            "from pathlib import Path\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from test_managed import EchoServer\n"
            f"s = EchoServer(Path({str(tmp_path)!r})).start(timeout_s=30)\n"
            "print(s.pid, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    owner = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert owner.returncode == -signal.SIGKILL, owner.stderr[-2000:]
    pid = int(owner.stdout.split()[0])
    deadline = time.monotonic() + 30
    try:
        while live_group_members(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live_group_members(pid) == []
    finally:
        for left in live_group_members(pid):  # only when the guard failed
            os.kill(left, signal.SIGKILL)
