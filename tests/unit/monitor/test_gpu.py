"""scripts.monitor.gpu against an ``nvidia-smi`` stand-in on PATH (this machine has no GPU): the
command line it is asked, the parsing, the sampler's thread and what it keeps."""
import os
import stat
import subprocess
import sys
import time

import pytest

from scripts.monitor import gpu


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """An nvidia-smi that answers the query gpu.py sends for two GPUs, busier at each call; it
    fails once the file ``broken`` exists."""
    calls = tmp_path / "calls"
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"""#!/bin/sh
[ -e {tmp_path}/broken ] && {{ echo "NVIDIA-SMI has failed" >&2; exit 9; }}
echo "$@" >> {calls}
n=$(wc -l < {calls})
[ "$1" = "--query-gpu=index,utilization.gpu,memory.used,memory.total" ] || exit 2
[ "$2" = "--format=csv,noheader,nounits" ] || exit 2
echo "0, $((n * 10)), $((n * 1000)), 81559"
echo "1, 0, 5, 81559"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_activity_parses_every_gpu(fake_smi):
    rows = gpu.gpu_activity()
    assert rows == [{"index": 0, "utilization_pct": 10.0, "memory_used_bytes": 1000 * 2**20, "memory_total_bytes": 81559 * 2**20},
                    {"index": 1, "utilization_pct": 0.0, "memory_used_bytes": 5 * 2**20, "memory_total_bytes": 81559 * 2**20}]


def test_sampler_keeps_samples_until_stopped_and_reports_peaks(fake_smi):
    with gpu.GpuSampler(interval_s=0.05) as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.rows) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
    kept = len(sampler.rows)
    time.sleep(0.2)
    assert kept >= 6 and len(sampler.rows) == kept  # stopped: nothing more comes
    assert sampler._thread is None and not sampler.errors
    times = [r["t"] for r in sampler.rows if r["index"] == 0]
    assert times == sorted(times)
    peak = sampler.peak()
    assert peak[1] == {"utilization_pct": 0.0, "memory_used_bytes": 5 * 2**20}
    assert peak[0]["utilization_pct"] == max(r["utilization_pct"] for r in sampler.rows if r["index"] == 0) >= 30


def test_a_failing_nvidia_smi_is_recorded_not_raised_in_the_thread(fake_smi):
    sampler = gpu.GpuSampler(interval_s=0.05).start()
    (fake_smi / "broken").touch()
    deadline = time.monotonic() + 10
    while not sampler.errors and time.monotonic() < deadline:
        time.sleep(0.02)
    sampler.stop()
    assert sampler.errors and "CalledProcessError" in sampler.errors[0]


def test_without_nvidia_smi_the_sampler_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="install the NVIDIA driver"):
        gpu.GpuSampler().start()
    with pytest.raises(ValueError, match="positive"):
        gpu.GpuSampler(interval_s=0)


def test_triton_gpu_metrics_are_recognised_on_a_metrics_page():
    page = ('# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n'
            'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5\n'
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 123\n')
    assert gpu.exports_gpu_metrics(page)
    assert not gpu.exports_gpu_metrics('nv_inference_count{model="engine",version="1"} 3\n')
    assert not gpu.exports_gpu_metrics("# HELP nv_gpu_utilization only the help line\n")


def test_sampler_for_a_profile_without_real_gpus_or_without_nvidia_smi(fake_smi, monkeypatch, tmp_path):
    from scripts.profiles import load_profile

    sampler, why = gpu.sampler_for(load_profile("cpu"))
    assert sampler is None and "'cpu' has no real GPU" in why
    sampler, why = gpu.sampler_for(load_profile("gpu-vllm"))
    assert sampler is not None and "every 1 s" in why
    sampler.stop()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    sampler, why = gpu.sampler_for(load_profile("gpu-vllm"))
    assert sampler is None and "nvidia-smi is not on PATH" in why


def test_plot_activity_draws_each_gpu(fake_smi):
    import matplotlib
    matplotlib.use("Agg")
    rows = [{"t": 100.0 + i, **g} for i in range(3) for g in gpu.gpu_activity()]
    fig = gpu.plot_activity(rows, 100.0, marks={"phase B": 101.0})
    util, mem = fig.axes
    assert [line.get_label() for line in util.get_lines() if not line.get_label().startswith("_")] == ["GPU 0", "GPU 1"]
    assert max(mem.get_lines()[0].get_ydata()) == pytest.approx(3000 / 1024)  # the third call: 3000 MiB, in GiB


def test_group_memory_adds_up_what_the_live_processes_of_a_group_hold():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        held = {child.pid: 3 * 2**30, 999_999_999: 5 * 2**30}  # the second is another group's process
        assert gpu.group_memory(child.pid, measure=lambda: held) == 3 * 2**30
    finally:
        child.kill()
        child.wait()


def test_host_pids_seen_from_a_container_stop_the_wait_with_the_flag_to_add():
    # nvidia-smi inside a container without --pid=host lists the host's PIDs: none is a process here
    host_pids = {4_000_001: 3 * 2**30, 4_000_002: 2**30}
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="--pid=host"):
        gpu.memory_of(lambda: [os.getpid()], 1, timeout_s=60, poll_s=0.01, measure=lambda: host_pids)
    assert time.monotonic() - start < 5  # at once, not after the timeout
    # a listing with one of ours is the normal case, even beside PIDs of other namespaces
    mine = {os.getpid(): 2**30, 4_000_001: 2**30}
    assert gpu.memory_of(lambda: [os.getpid()], 1, poll_s=0.01, measure=lambda: mine) == [2**30]
