"""scripts.bench.process_usage: CPU seconds of process trees between marks, with a real busy child
process; resident memory."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scripts.bench.process_usage import (REST, CpuMeter, attribute, machine_busy_seconds, per_token_ms, rss_bytes,
                                         rss_table, tree_cpu_seconds)

#: Waits for a line, burns 0.3 s of its own CPU time, says so, and stays alive until stdin closes
#: (a process that exited is no longer in its parent's tree).
BUSY = """
import sys, time
sys.stdin.readline()
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print("done", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def busy_child():
    child = subprocess.Popen([sys.executable, "-S", "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)

    def burn():
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"

    try:
        yield child, burn
    finally:
        child.stdin.close()
        child.wait(10)


def test_a_busy_child_counts_with_its_parent(busy_child):
    child, burn = busy_child
    meter = CpuMeter({"child": [child.pid]})
    family = CpuMeter({"tests": [os.getpid()]})  # this process is the child's parent
    meter.mark()
    family.mark()
    burn()
    meter.mark("a progress line")  # arguments ignored: usable as a callback
    family.mark()
    (row,) = meter.intervals()
    assert 0.28 <= row["child"] < 2.0
    assert row["wall_s"] >= 0.28
    assert row["machine"] >= 0.25  # the whole machine was at least as busy as the child
    assert row[REST] == pytest.approx(max(0.0, row["machine"] - row["child"]))
    (parent_row,) = family.intervals()
    assert parent_row["tests"] >= row["child"] - 0.02
    # the child counts once, named or not beside its parent
    alone, both = tree_cpu_seconds([os.getpid()]), tree_cpu_seconds([os.getpid(), child.pid, child.pid])
    assert both == pytest.approx(alone, abs=0.05)
    assert tree_cpu_seconds([child.pid]) >= 0.28


def test_a_dead_pid_is_ignored():
    gone = subprocess.Popen(["true"])
    gone.wait(10)
    assert tree_cpu_seconds([gone.pid]) == 0.0
    assert tree_cpu_seconds([]) == 0.0
    assert tree_cpu_seconds([gone.pid, os.getpid()]) > 0.0
    meter = CpuMeter({"gone": [gone.pid]})
    meter.mark()
    meter.mark()
    assert meter.intervals()[0]["gone"] == 0.0


def test_machine_busy_seconds_grow():
    before = machine_busy_seconds()
    assert before > 0.0
    assert machine_busy_seconds() >= before


def test_callable_groups_are_asked_at_every_mark():
    calls = []

    def roots():
        calls.append(1)
        return [os.getpid()] if len(calls) > 1 else []  # the group's process appears after the first mark

    meter = CpuMeter({"late": roots, "fixed": (os.getpid(),)})
    for _ in range(3):
        meter.mark()
    assert len(calls) == 3
    assert [m["late"] > 0 for m in meter.marks] == [False, True, True]
    assert len(meter.intervals()) == 2


def test_intervals_are_the_differences_of_consecutive_marks():
    meter = CpuMeter({"a": [], "b": []})
    assert meter.intervals() == []
    meter.marks = [{"time": 10.0, "machine": 100.0, "a": 1.0, "b": 2.0},
                   {"time": 12.0, "machine": 104.0, "a": 2.0, "b": 2.5},
                   {"time": 13.0, "machine": 104.5, "a": 1.5, "b": 3.0}]  # a's process went: no negative CPU
    assert meter.intervals() == [
        {"wall_s": 2.0, "machine": 4.0, "a": 1.0, "b": 0.5, REST: 2.5},
        {"wall_s": 1.0, "machine": 0.5, "a": 0.0, "b": 0.5, REST: 0.0},
    ]
    meter.marks.append({"time": 14.0, "machine": 105.0, "a": 3.0, "b": 3.5})  # groups above the machine: REST 0
    assert meter.intervals()[-1][REST] == 0.0


def test_echo_prints_and_marks(capsys):
    meter = CpuMeter({"tests": [os.getpid()]})
    meter.echo("vllm c=1 repeat=0 ...")
    assert capsys.readouterr().out == "vllm c=1 repeat=0 ...\n"
    assert len(meter.marks) == 1


def test_per_token_ms():
    interval = {"serve": 0.5, "triton": 0.25, REST: 1.0}
    assert per_token_ms(interval, 250, ["serve", "triton", "absent"]) == {"serve": 2.0, "triton": 1.0, "absent": 0.0}
    for tokens in (0, -1):
        with pytest.raises(ValueError, match=f"tokens must be positive, got {tokens}"):
            per_token_ms(interval, tokens, ["serve"])


def test_attribute_gives_each_run_its_interval_per_token():
    rows = [{"label": "vllm", "concurrency": 1, "repeat": 0, "output_tokens": 100},
            {"label": "serve", "concurrency": 1, "output_tokens": None},  # failed: left out
            {"label": "serve", "concurrency": 4, "repeat": 1, "output_tokens": 300}]
    intervals = [{"engine": 0.2}, {"engine": 1.0}, {"engine": 0.3, "proxy": 0.0333}]
    assert attribute(rows, intervals, ["engine", "proxy"]) == [
        {"label": "vllm", "concurrency": 1, "repeat": 0, "engine": 2.0, "proxy": 0.0},
        {"label": "serve", "concurrency": 4, "repeat": 1, "engine": 1.0, "proxy": 0.111}]


def test_rss_of_this_process_and_of_a_gone_one():
    assert rss_bytes(os.getpid()) > 10 * 2**20 and rss_bytes(2**22 - 3) == 0
    assert list(rss_table([("me", os.getpid())])) == [f"me ({os.getpid()})"]
