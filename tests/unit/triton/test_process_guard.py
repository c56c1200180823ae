import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from scripts.triton import process_guard as pg
from scripts.triton import server as ts

# A stand-in server: a process-group leader that spawns a child which ignores SIGTERM (as
# multiprocessing's resource tracker does), both in the leader's process group.
SERVER = ("import signal, subprocess, sys, time\n"
          "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "time.sleep(120)'])\n"
          "time.sleep(120)\n")


def wait_for(predicate, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def start_group():
    leader = subprocess.Popen([sys.executable, "-c", SERVER], process_group=0)
    assert wait_for(lambda: len(pg.live_group_members(leader.pid)) == 2)
    return leader


def test_guard_stops_the_group_when_its_owner_dies(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    leader = start_group()
    shm = Path("/dev/shm") / f"guardtest{os.getpid()}_x"
    try:
        shm.write_bytes(b"x")
        guard = subprocess.Popen([sys.executable, "-m", "scripts.triton.process_guard", "--owner", str(owner.pid), "--group",
                                  str(leader.pid), "--grace", "1", "--shm-prefix", f"guardtest{os.getpid()}_"],
                                 process_group=leader.pid)
        time.sleep(1)
        assert guard.poll() is None and len(pg.live_group_members(leader.pid)) == 3  # owner alive: nothing happens
        owner.kill()
        owner.wait()
        assert guard.wait(timeout=30) == 0
        leader.wait(timeout=10)
        assert wait_for(lambda: not pg.live_group_members(leader.pid)), "the SIGTERM-proof child survived"
        assert not shm.exists()
    finally:
        shm.unlink(missing_ok=True)
        owner.kill()
        for pid in pg.live_group_members(leader.pid):
            os.kill(pid, signal.SIGKILL)


def test_guard_leaves_when_the_group_is_stopped_normally():
    leader = start_group()
    guard = subprocess.Popen([sys.executable, "-m", "scripts.triton.process_guard", "--owner", str(os.getpid()), "--group",
                              str(leader.pid)], process_group=leader.pid)
    time.sleep(0.5)
    os.killpg(leader.pid, signal.SIGKILL)
    leader.wait()
    assert guard.wait(timeout=10) == -signal.SIGKILL
    # SIGKILL is delivered at once but a process takes a moment to exit, the more so on a busy machine.
    assert wait_for(lambda: not pg.live_group_members(leader.pid), timeout_s=10), pg.live_group_members(leader.pid)


def test_guard_returns_when_the_group_is_gone():
    assert pg.guard(owner=os.getpid(), pgid=2**22 - 7, grace_s=1) == "group gone"


def test_zombies_do_not_count_as_running():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert wait_for(lambda: pg.process_state(child.pid) == "Z")
    assert not pg.is_running(child.pid) and pg.is_running(os.getpid())
    child.wait()
    assert pg.process_state(child.pid) is None


def test_triton_server_killed_owner_leaves_nothing(tmp_path, build_root):
    """The owner of a real tritonserver is killed with SIGKILL: its guard stops the whole group."""
    (tmp_path / "repo").mkdir()
    code = ("import os, signal; from scripts.triton.server import TritonServer\n"
            f"s = TritonServer({str(tmp_path / 'repo')!r}, exit_timeout_s=1)\n"
            "s.start(timeout_s=60); print(s.pid, s.command.shm_prefix, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=os.environ | {"TUTORIAL_BUILD_DIR": str(build_root)})
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    pid, prefix = out.stdout.split()
    assert wait_for(lambda: not ts.live_group_members(int(pid)), timeout_s=60)
    assert not list(Path("/dev/shm").glob(f"{prefix}*"))


def test_shm_segments_matches_prefixes_only(tmp_path):
    import uuid

    prefix = f"tutorial-test-{uuid.uuid4().hex[:8]}-"
    made = [Path("/dev/shm") / f"{prefix}{i}" for i in range(2)]
    for path in made:
        path.write_bytes(b"x")
    try:
        assert pg.shm_segments(prefix) == sorted(made)
        assert pg.shm_segments("", prefix + "1") == [made[1]]  # an empty prefix matches nothing
        assert pg.shm_segments() == []
    finally:
        for path in made:
            path.unlink(missing_ok=True)


def test_still_running_waits_for_an_exiting_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        assert pg.still_running([child.pid], timeout_s=0) == [child.pid]
        assert pg.still_running([child.pid], timeout_s=10) == []  # exited: a zombie until reaped counts as gone
        assert child.wait(10) == 0
    finally:
        child.kill()
