"""ManagedTriton's health answer when its Triton has crashed: not ready, and what the crash left
of the server's group (vLLM's engine processes are the stubs' children) is stopped at once."""
import asyncio
import os
import signal
import subprocess
import sys
import time

from scripts.triton import client
from scripts.procs.process_guard import live_group_members

# A stand-in server: the group leader exits at once (a crash), its child lives on in the group.
CRASHING = ("import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n")


class Server:
    """What ManagedTriton needs of scripts.triton.server.TritonServer, over the stand-in group."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-c", CRASHING], process_group=0)
        self.process.wait()
        self.stops = 0

    def group_alive(self):
        return bool(live_group_members(self.process.pid))

    def stop(self):
        self.stops += 1
        for pid in live_group_members(self.process.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_crashed_triton_is_not_ready_and_its_leftovers_are_stopped():
    managed = client.ManagedTriton.__new__(client.ManagedTriton)  # no real Triton: the server is the stand-in
    managed.server = Server()
    deadline = time.monotonic() + 10
    while not managed.server.group_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert managed.server.group_alive(), "the stand-in's child did not start"
    assert asyncio.run(managed.ready()) is False
    assert managed.server.stops == 1
    deadline = time.monotonic() + 10
    while managed.server.group_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not managed.server.group_alive()
    assert asyncio.run(managed.ready()) is False and managed.server.stops == 1  # nothing left to stop
