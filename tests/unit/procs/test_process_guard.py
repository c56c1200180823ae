import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from scripts.procs import process_guard as pg

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
        guard = subprocess.Popen([sys.executable, "-m", "scripts.procs.process_guard", "--owner", str(owner.pid), "--group",
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


def test_guard_removes_a_file_the_group_mapped_once_its_process_died_while_owner_and_group_live(tmp_path):
    """A vLLM engine that ends before it closes its psm_* queues leaves them behind; the owner's stop()
    comes later and no longer sees who mapped them. The guard saw them mapped: it removes them then."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    leader = start_group()
    shm, kept = (Path("/dev/shm") / f"guardtest{os.getpid()}_{n}" for n in ("orphan", "kept"))
    mapper_code = ("import mmap, sys, time\n"
                   "files = [open(p, 'w+b') for p in sys.argv[1:]]\n"
                   "maps = [(f.write(b'x' * 4096), f.flush(), mmap.mmap(f.fileno(), 4096)) for f in files]\n"
                   "time.sleep(120)\n")
    try:
        guard_log = tmp_path / "guard.log"
        with guard_log.open("w") as out:
            guard = subprocess.Popen([sys.executable, "-m", "scripts.procs.process_guard", "--owner", str(owner.pid), "--group",
                                      str(leader.pid), "--grace", "1"], process_group=leader.pid, stdout=out)
        mapper = subprocess.Popen([sys.executable, "-c", mapper_code, str(shm), str(kept)], process_group=leader.pid)
        holder = subprocess.Popen([sys.executable, "-c", mapper_code, str(kept)])  # outside the group: kept is in use
        assert wait_for(lambda: shm.exists() and pg.shm_files_of([mapper.pid, holder.pid]) == {shm, kept})
        # the guard has noted both (it scans every 2 s): seen in its log, however slow the machine
        assert wait_for(lambda: all(f"watching {p} " in guard_log.read_text() for p in (shm, kept)), timeout_s=30), \
            guard_log.read_text()
        mapper.kill()
        mapper.wait()
        assert wait_for(lambda: not shm.exists(), timeout_s=10), "the dead process's /dev/shm file was left"
        assert kept.exists() and guard.poll() is None  # still mapped by another process; the group still runs
        holder.kill()
        holder.wait()
    finally:
        for path in (shm, kept):
            path.unlink(missing_ok=True)
        owner.kill()
        for pid in pg.live_group_members(leader.pid):
            os.kill(pid, signal.SIGKILL)


def test_guard_outlives_an_owner_that_kills_its_children_as_it_exits(tmp_path):
    """A Ray worker kills its direct children when it exits (ray-project/ray
    doc/source/ray-core/user-spawn-processes.rst, ``RAY_kill_child_processes_on_worker_exit``, on by
    default): the server and a guard started as a child die with it, the server's own children live
    on. The launcher's guard detaches, so it survives and stops them."""
    shm = Path("/dev/shm") / f"guardtest{os.getpid()}_mapped"
    guard_log = tmp_path / "guard.log"
    owner_code = (
        "import atexit, json, mmap, os, signal, subprocess, sys, time\n"
        "from scripts.procs.process_guard import OWNER_GONE_GRACE_S\n"
        f"leader = subprocess.Popen([sys.executable, '-c', {SERVER!r}], process_group=0)\n"
        # the server's child maps a /dev/shm file, as vLLM's engine does, and leaves it behind when killed
        f"mapper = subprocess.Popen([sys.executable, '-c', \"import mmap, os, time; f = open({str(shm)!r}, 'w+b'); "
        "f.write(b'x' * 4096); f.flush(); m = mmap.mmap(f.fileno(), 4096); time.sleep(120)\"], process_group=leader.pid)\n"
        f"log = open({str(guard_log)!r}, 'w')\n"
        "starter = subprocess.Popen([sys.executable, '-m', 'scripts.procs.process_guard', '--owner', str(os.getpid()), "
        "'--group', str(leader.pid), '--grace', str(OWNER_GONE_GRACE_S), '--detach'], process_group=leader.pid, stdout=log)\n"
        "assert starter.wait(10) == 0\n"
        "print(leader.pid, flush=True)\n"
        # the guard has noted the mapped file: seen in its log (it scans every 2 s), not waited for by the clock
        "deadline = time.monotonic() + 30\n"
        f"while 'watching {shm} ' not in open({str(guard_log)!r}).read():\n"
        "    assert time.monotonic() < deadline, 'the guard never noted the mapped file'\n"
        "    time.sleep(0.1)\n"
        "leader.kill()\n"  # as Ray does: SIGKILL to the direct children, then exit
        "os._exit(1)\n")
    owner = subprocess.run([sys.executable, "-c", owner_code], capture_output=True, text=True, timeout=60)
    try:
        pgid = int(owner.stdout.split()[0])
        assert wait_for(lambda: not pg.live_group_members(pgid), timeout_s=30), (pg.live_group_members(pgid), owner.stderr)
        assert wait_for(lambda: not shm.exists(), timeout_s=30), "the group's /dev/shm file was left behind"
    finally:
        shm.unlink(missing_ok=True)
        for pid in pg.live_group_members(int(owner.stdout.split()[0])) if owner.stdout.split() else []:
            os.kill(pid, signal.SIGKILL)


def test_shm_files_of_finds_mapped_and_open_files_and_only_unused_ones_are_removed(tmp_path):
    mapped, opened = (Path("/dev/shm") / f"guardtest{os.getpid()}_{n}" for n in ("m", "o"))
    code = (f"import mmap, time; f = open({str(mapped)!r}, 'w+b'); f.write(b'x' * 4096); f.flush(); "
            f"m = mmap.mmap(f.fileno(), 4096); f.close(); g = open({str(opened)!r}, 'wb'); print('ok', flush=True); "
            "time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        assert pg.shm_files_of([holder.pid]) == {mapped, opened}
        assert pg.remove_unused_shm({mapped, opened}) == [] and mapped.exists()  # still in use: kept
        holder.kill()
        holder.wait()
        assert pg.remove_unused_shm({mapped, opened}) == sorted([mapped, opened]) and not mapped.exists()
    finally:
        holder.kill()
        for path in (mapped, opened):
            path.unlink(missing_ok=True)


def test_guard_leaves_when_the_group_is_stopped_normally():
    leader = start_group()
    guard = subprocess.Popen([sys.executable, "-m", "scripts.procs.process_guard", "--owner", str(os.getpid()), "--group",
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


def test_live_group_members_excludes_zombies():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert pg.live_group_members(child.pid) == [child.pid]
        os.killpg(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pg.process_state(child.pid) != "Z" and time.monotonic() < deadline:  # a zombie until reaped
            time.sleep(0.05)
        assert pg.process_state(child.pid) == "Z"
        assert pg.live_group_members(child.pid) == []
    finally:
        child.kill()
        child.wait()


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


def test_start_guarded_puts_the_command_and_its_guard_in_a_group_of_their_own(tmp_path):
    live_group_members, stop_group = pg.live_group_members, pg.stop_group
    with open(tmp_path / "log", "wb") as log:
        process = pg.start_guarded(["sleep", "30"], log, env=dict(os.environ), cwd=tmp_path, grace_s=1)
    try:
        assert os.getpgid(process.pid) == process.pid != os.getpgid(0)
        deadline = time.monotonic() + 10
        while len(live_group_members(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.pid in live_group_members(process.pid) and len(live_group_members(process.pid)) == 2  # + the guard
    finally:
        stop_group(process.pid, 2)
        process.wait()
    assert live_group_members(process.pid) == []



def test_run_guarded_returns_the_status_and_leaves_nothing_of_the_group(tmp_path):
    # the command leaves a child behind in its group, and a /dev/shm file that the child maps
    shm = Path("/dev/shm") / f"guardtest{os.getpid()}_run"
    (tmp_path / "child.py").write_text(f"import mmap, time\nf = open({str(shm)!r}, 'w+b')\nf.truncate(4096)\n"
                                       "m = mmap.mmap(f.fileno(), 4096)\nprint('mapped', flush=True)\ntime.sleep(60)\n")
    (tmp_path / "parent.py").write_text("import subprocess, sys, time\n"
                                        "subprocess.Popen([sys.executable, 'child.py'])\n"
                                        "time.sleep(2)\nprint('done', flush=True)\nsys.exit(3)\n")
    args = dict(env=dict(os.environ), cwd=tmp_path, grace_s=1)
    start = time.monotonic()
    assert pg.run_guarded([sys.executable, "parent.py"], tmp_path / "a.log", timeout_s=30, **args) == 3
    assert time.monotonic() - start < 20 and not shm.exists()
    lines = (tmp_path / "a.log").read_text().splitlines()  # the command's lines, and what the guard watched
    assert [line for line in lines if not line.startswith("process guard: ")] == ["mapped", "done"]
    assert all(str(shm) in line for line in lines if line.startswith("process guard: watching"))
    assert not [pid for pid, cmdline in running_cmdlines().items() if "child.py" in cmdline]
    start = time.monotonic()
    assert pg.run_guarded(["sleep", "60"], tmp_path / "b.log", timeout_s=1, **args) == -signal.SIGKILL
    assert time.monotonic() - start < 15


def running_cmdlines() -> dict[int, str]:
    found = {}
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found[int(path.parent.name)] = path.read_text(errors="ignore")
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return found
