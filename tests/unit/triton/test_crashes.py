"""The crash reports a failed test gets: from this process's servers and from the build's Triton logs."""
import os
import signal
import time

from scripts.triton import crashes
from scripts.triton.server import TritonServer

STOPPED = "I1204 server.cc:305] \"Waiting for in-flight requests to complete.\"\nSignal (15) received.\n"
CRASHED = "I1204 model_lifecycle.cc:472] \"loading: vllm_model:1\"\nSignal (11) received.\n 0# 0x00005 in tritonserver\n"


def test_only_a_signal_other_than_a_stop_is_a_crash(tmp_path):
    logs = {name: tmp_path / f"tritonserver-{port}.log" for name, port in (("stopped", 1), ("crashed", 2), ("both", 3))}
    logs["stopped"].write_text(STOPPED)
    logs["crashed"].write_text(CRASHED)
    logs["both"].write_text(CRASHED.replace("Signal (11)", "Signal (6)") + STOPPED)
    assert [crashes.crash_signal(logs[n]) for n in ("stopped", "crashed", "both")] == [None, 11, 6]
    assert crashes.crash_signal(tmp_path / "missing.log") is None
    assert crashes.crashed_logs(tmp_path, since=0) == sorted([logs["crashed"], logs["both"]])
    assert crashes.crashed_logs(tmp_path, since=time.time() + 60) == []  # older than the run: not its crash
    assert crashes.crashed_logs(tmp_path / "none", since=0) == []


def test_reports_name_each_crash_once_with_its_signal_and_tail(build_root, tmp_path):
    log_dir = build_root / "triton" / "logs"
    log_dir.mkdir(parents=True)
    (log_dir / "tritonserver-5.log").write_text("+----+\n| table |\n" + CRASHED)
    (tmp_path / "repo").mkdir()
    server = TritonServer(tmp_path / "repo", exit_timeout_s=1).start(timeout_s=60)
    try:
        os.kill(server.pid, signal.SIGSEGV)
        server.process.wait(timeout=30)
        seen: set[str] = set()
        reports = crashes.crash_reports(since=time.time() - 60, seen=seen)
        mine = [r for r in reports if r.startswith(f"tritonserver (pid {server.pid}) ended with SIGSEGV")]
        from_log = [r for r in reports if r.startswith(f"tritonserver received SIGSEGV; log {log_dir / 'tritonserver-5.log'}")]
        assert len(mine) == 1 and len(from_log) == 1, reports
        assert "loading: vllm_model:1" in from_log[0] and "| table |" not in from_log[0]
        assert crashes.crash_reports(since=time.time() - 60, seen=seen) == []  # each crash once
    finally:
        server.stop()


def test_a_load_stalls_when_initialize_returned_long_ago_and_triton_said_nothing_since():
    def returned(name, at):
        return f"vllm backend: initialize() of '{name}' returned at {at:.3f}\n"
    loaded = returned("a", 100.0) + 'I1205 model_lifecycle.cc:839] "successfully loaded \'a\'"\n'
    failed = returned("b", 100.0) + 'E1205 model_lifecycle.cc:642] "failed to load \'b\' version 1: ..."\n'
    waiting = returned("c", 100.0) + 'I1205 model_lifecycle.cc:839] "successfully loaded \'preprocessing\'"\n'
    recent = returned("d", 190.0)
    assert crashes.stalled_loads(loaded + failed + waiting + recent, now=200.0, after_s=60) == ["c"]
    assert crashes.stalled_loads(waiting, now=150.0, after_s=60) == []  # not long enough yet
    assert crashes.stalled_loads("no marker at all\n", now=1e12, after_s=0) == []
    # preprocessing's stub answered initialize() and the answer never came: the same stall (seen in a 05 deploy)
    python_model = "python model: initialize() of 'preprocessing' returned at 100.000\n"
    assert crashes.stalled_loads(python_model + returned("vllm_engine", 100.0) +
                                 'I1207 model_lifecycle.cc:839] "successfully loaded \'vllm_engine\'"\n',
                                 now=200.0, after_s=60) == ["preprocessing"]
    # two instances: the model loads once the second has initialized too
    assert crashes.stalled_loads(returned("e", 100.0) + returned("e", 170.0), now=200.0, after_s=60) == []
