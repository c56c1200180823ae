import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from scripts.procs import process_guard
from scripts.procs.connections import established_to
from scripts.triton import server as ts
from scripts.triton.repository.lint import lint
from scripts.profiles import load_profile
from scripts.triton.repository.fill import ENGINE_MODEL, RepoSettings, fill_for_profile, template_values, tree
from scripts.engine import config as engine


def command(**kw):
    args = dict(model_repo=Path("/r"), http_port=1, grpc_port=2, metrics_port=3, backend_dir=Path("/b"),
                shm_prefix="tut_", binary=Path("/x/pytriton/tritonserver/bin/tritonserver"))
    return ts.ServerCommand(**(args | kw))


def test_command_binds_loopback_and_unique_shm_prefix():
    argv = command().argv()
    assert argv[0].endswith("tritonserver")
    for flag in ("--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                 "--http-port=1", "--grpc-port=2", "--metrics-port=3", "--model-repository=/r",
                 "--backend-directory=/b", "--backend-config=python,shm-region-prefix-name=tut_0_"):
        assert flag in argv


def test_container_command_has_no_backend_dir():
    assert not any(a.startswith("--backend-directory") for a in command(backend_dir=None).argv())


def test_world_size_uses_mpirun_one_rank_each():
    argv = command(world_size=2).argv()
    assert argv[:2] == ["mpirun", "--allow-run-as-root"] and argv.count("-n") == 2 and argv.count(":") == 1
    assert "--backend-config=python,shm-region-prefix-name=tut_1_" in argv
    assert "--load-model=tensorrt_llm" in argv


def ranks(argv: list[str]) -> list[list[str]]:
    """The per-rank command lines of an ``mpirun -n 1 A : -n 1 B`` command."""
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    out, current = [], []
    for arg in argv[2:] + [":"]:
        if arg == ":":
            assert current[:2] == ["-n", "1"]
            out.append(current[2:])
            current = []
        else:
            current.append(arg)
    return out


def test_mpirun_ranks_as_tensorrt_llm_launcher_builds_them():
    """tensorrtllm_backend@v0.17.0:scripts/launch_triton_server.py (get_cmd): every rank gets
    --disable-auto-complete-config and its own shm-region-prefix-name; ranks above 0 load only the
    tensorrt_llm model, in explicit model control; what the caller adds belongs to rank 0."""
    extra = ("--model-control-mode=explicit", "--load-model=ensemble")
    per_rank = ranks(command(world_size=3, extra_args=extra).argv())
    assert len(per_rank) == 3
    for rank, args in enumerate(per_rank):
        assert args[0].endswith("tritonserver") and "--model-repository=/r" in args
        assert args.count("--disable-auto-complete-config") == 1, rank
        assert f"--backend-config=python,shm-region-prefix-name=tut_{rank}_" in args
    rank0, *workers = per_rank
    assert rank0[-2:] == list(extra) and "--load-model=tensorrt_llm" not in rank0
    for args in workers:
        assert "--load-model=ensemble" not in args
        assert args[-2:] == ["--model-control-mode=explicit", "--load-model=tensorrt_llm"]


def test_single_rank_command_is_unchanged_by_mpi_rules():
    argv = command(extra_args=("--model-control-mode=explicit", "--load-model=ensemble")).argv()
    assert argv[0].endswith("tritonserver") and "mpirun" not in argv
    assert "--disable-auto-complete-config" not in argv  # as before: the cpu command stays the same
    assert argv[-2:] == ["--model-control-mode=explicit", "--load-model=ensemble"]
    assert argv[2] == "--backend-directory=/b"


def test_environment_puts_this_venv_first_and_wheel_libs(monkeypatch):
    env = command().environment({"PATH": "/usr/bin"})
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env["LC_ALL"] == "C.UTF-8" and "nvidia_pytriton.libs" in env["LD_LIBRARY_PATH"]


def test_missing_repository_says_to_fill_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="fill it first"):
        ts.TritonServer(tmp_path / "none")


def test_start_failure_reports_log_tail_and_cleans_up(build_root, tmp_path):
    bad = tmp_path / "repo" / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "broken"\nbackend: "python"\nthis is not protobuf\n')
    server = ts.TritonServer(tmp_path / "repo", exit_timeout_s=1)
    with pytest.raises(ts.TritonStartError, match="exited with status"):
        server.start(timeout_s=60)
    assert not server.group_members() and not server.leftover_shm()


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
    deadline = time.monotonic() + 60
    while process_guard.live_group_members(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_guard.live_group_members(int(pid))
    assert not list(Path("/dev/shm").glob(f"{prefix}*"))


def test_fill_for_cpu_profile_lints_clean(build_root):
    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    out = fill_for_profile(profile)
    repo = Path(out["repository"])
    assert out["models"] == ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm_bls", "vllm_engine", "vllm_model"]
    assert not lint(repo), lint(repo)
    assert 'model_name: "vllm_engine"' in (repo / "ensemble" / "config.pbtxt").read_text()
    assert (repo / "vllm_model" / "1" / "model.json").is_file()
    assert "vllm_engine/" in tree(repo)


def test_fill_for_gpu_profile_lints_clean(build_root):
    profile = load_profile("gpu-trtllm")
    engine.write_engine_config(profile)
    repo = Path(fill_for_profile(profile, RepoSettings(decoupled_mode=True))["repository"])
    assert not lint(repo), lint(repo)
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert 'backend: "tensorrtllm"' in config and "decoupled: true" in config
    assert f'string_value: "{build_root}/engine/trtllm"' in config
    assert not (repo / "vllm_model").exists()


def test_template_values_pick_the_engine_model():
    values = template_values({"engine": "vllm", "model_dir": "/m", "max_model_len": 64}, RepoSettings(), "/e")
    assert values["ensemble"]["engine_model_name"] == ENGINE_MODEL["vllm"] == "vllm_engine"
    assert values["vllm_engine"]["engine_dir"] == "/e" and values["preprocessing"]["max_model_len"] == 64
    assert values["preprocessing"]["max_input_len"] == 0  # vLLM has no separate prompt limit


def test_template_values_take_tensorrt_llm_build_limits():
    config = {"engine": "tensorrt_llm", "model_dir": "/m", "max_model_len": 4096, "engine_dir": "/e",
              "max_input_len": 1024, "max_seq_len": 2048}
    values = template_values(config, RepoSettings(), "/elsewhere")
    assert values["tensorrt_llm"]["engine_dir"] == "/e"  # the engine config's own engine_dir wins
    assert (values["preprocessing"]["max_model_len"], values["preprocessing"]["max_input_len"]) == (2048, 1024)
    assert values["tensorrt_llm"]["batching_strategy"] == "inflight_fused_batching"
    assert values["tensorrt_llm"]["batch_scheduler_policy"] == "guaranteed_no_evict"
    assert "logits_datatype" not in values["tensorrt_llm"]


def test_cpu_preprocessing_limits_are_max_model_len_only(build_root):
    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    repo = Path(fill_for_profile(profile)["repository"])
    text = (repo / "preprocessing" / "config.pbtxt").read_text()
    assert 'key: "max_model_len" value: { string_value: "512" }' in text
    assert 'key: "max_input_len" value: { string_value: "0" }' in text


def test_server_left_running_is_stopped_at_interpreter_exit(tmp_path, build_root):
    code = (
        "import sys; from scripts.triton.server import TritonServer\n"
        f"s = TritonServer({str(tmp_path / 'repo')!r}, exit_timeout_s=1)\n"
        "s.start(timeout_s=60); print(s.pid, flush=True)\n"  # exits without stop()
    )
    (tmp_path / "repo").mkdir()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=os.environ | {"TUTORIAL_BUILD_DIR": str(build_root)})
    assert out.returncode == 0, out.stderr[-2000:]
    pid = int(out.stdout.split()[0])
    assert process_guard.live_group_members(pid) == []


def test_start_retries_once_after_a_crash_and_says_so(build_root, tmp_path, monkeypatch, capsys):
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo")
    first_port = server.command.http_port
    calls = []

    def fake_start_once(timeout_s):
        calls.append(server.command.http_port)
        if len(calls) == 1:
            server.process = type("P", (), {"returncode": -6})()
            raise ts.TritonStartError("exited with status -6: boost::interprocess::lock_exception")
        return server

    monkeypatch.setattr(server, "_start_once", fake_start_once)
    assert server.start(retries=1) is server
    assert len(calls) == 2 and calls[1] != first_port
    assert "crashed during start-up, starting it again" in capsys.readouterr().err


def test_start_does_not_retry_a_plain_failure(build_root, tmp_path, monkeypatch):
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo")

    def fail(timeout_s):
        server.process = type("P", (), {"returncode": 1})()
        raise ts.TritonStartError("exited with status 1")

    monkeypatch.setattr(server, "_start_once", fail)
    with pytest.raises(ts.TritonStartError, match="status 1"):
        server.start(retries=3)


def test_start_does_not_retry_a_server_that_refused_the_repository(build_root, tmp_path, monkeypatch):
    """2.51 can crash on its way out after refusing a model (exiting with others still loaded):
    that is not a start-up flake, and a second start would fail the same."""
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo")
    calls = []

    def refused(timeout_s):
        calls.append(timeout_s)
        server.process = type("P", (), {"returncode": -11})()
        raise ts.TritonStartError("tritonserver exited with status -11 before it was ready; log x:\n"
                                  "error: creating server: Invalid argument - load failed for model 'ensemble'\n"
                                  "double free or corruption (out)")

    monkeypatch.setattr(server, "_start_once", refused)
    with pytest.raises(ts.TritonStartError, match="load failed for model 'ensemble'"):
        server.start(retries=1)
    assert len(calls) == 1


def test_log_tail_leaves_out_triton_tables(build_root, tmp_path):
    """Triton prints its option table after the error lines that say what failed; the tail keeps those."""
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo")
    table = ["+--------+-------+", "| Option | Value |", *[f"| opt{i}   | {i}     |" for i in range(60)], "+--------+"]
    server.log_path.parent.mkdir(parents=True, exist_ok=True)
    server.log_path.write_text("\n".join(["E1203 model_repository_manager.cc] \"Poll failed for model directory 'm'\"",
                                          *table, "error: creating server: Internal - failed to load all models"]))
    assert server.log_tail().splitlines() == ["E1203 model_repository_manager.cc] \"Poll failed for model directory 'm'\"",
                                              "error: creating server: Internal - failed to load all models"]


def test_a_crashed_server_is_reported_and_restarted_on_new_ports(build_root, tmp_path, capsys):
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo", exit_timeout_s=1)
    assert server in ts.TritonServer.started and not server.crashed()  # not started: nothing crashed
    with server.start(timeout_s=60):
        first = server.pid, server.http_url
        assert not server.crashed() and server.restart_if_crashed() is False
        os.kill(server.pid, signal.SIGSEGV)  # what a crash in the server looks like to its owner
        server.process.wait(timeout=30)
        assert server.crashed()
        assert server.crash_report().startswith(f"tritonserver (pid {first[0]}) ended with SIGSEGV; log ")
        assert server.restart_if_crashed(timeout_s=60) is True
        assert (server.pid, server.http_url) != first and server.is_ready() and not server.crashed()
        assert "tritonserver crashed, starting it again" in capsys.readouterr().err
        assert process_guard.live_group_members(first[0]) == []  # nothing of the crashed server is left
    assert not server.crashed()  # stopped by its owner: SIGTERM is no crash



HOLDER = """
import sys, requests
with requests.Session() as session:  # keeps its connection alive between requests, as every pool does
    session.get(sys.argv[1] + "/v2/health/live", timeout=10).raise_for_status()
    print("connected", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def test_a_connection_another_process_keeps_open_costs_the_exit_timeout_and_stop_names_it(build_root, tmp_path, capsys):
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo", exit_timeout_s=2).start(timeout_s=60)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, server.http_url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "connected"
        assert established_to(server.command.http_port) == 1
        server.stop()
    finally:
        holder.communicate(timeout=30)
        server.stop()
    assert f"1 client connection(s) of other processes to {server.http_url} still open" in capsys.readouterr().err
    # it counted the whole exit timeout down (2, 1) before it went on to the models
    assert "Timeout 1: Found 1 HTTP service connections" in server.log_path.read_text()


def test_stop_ends_this_processs_own_connections_and_the_server_does_not_wait(build_root, tmp_path, capsys):
    (tmp_path / "repo").mkdir()
    server = ts.TritonServer(tmp_path / "repo", exit_timeout_s=2).start(timeout_s=60)
    kept = requests.get(f"{server.http_url}/v2/health/live", timeout=10)  # an answer in a variable holds its connection
    session = requests.Session()
    session.get(f"{server.http_url}/v2/health/ready", timeout=10).raise_for_status()
    assert kept.ok and established_to(server.command.http_port) == 2
    server.stop()
    assert "still open" not in capsys.readouterr().err
    assert "service connections" not in server.log_path.read_text()
    with pytest.raises(requests.ConnectionError):  # the pool finds its connection closed, and the server gone
        session.get(f"{server.http_url}/v2/health/ready", timeout=10)
    session.close()


def test_a_stalled_load_fails_the_start_at_once_and_a_retry_starts_the_server_again(build_root, tmp_path, capsys, monkeypatch):
    (tmp_path / "repo").mkdir()
    real_ready = ts.TritonServer.is_ready
    # the first attempt of each server has a stalled load (as crashes.stalled_loads reads it from a log)
    monkeypatch.setattr(ts.crashes, "stalled_loads", lambda text, now, after_s: ["vllm_engine"] if server.log_path == first_log else [])
    monkeypatch.setattr(ts.TritonServer, "is_ready", lambda self: self.log_path != first_log and real_ready(self))
    server = ts.TritonServer(tmp_path / "repo", exit_timeout_s=1)
    first_log = server.log_path
    with pytest.raises(ts.TritonStartError, match="the load of vllm_engine stalled") as raised:
        server.start(timeout_s=60)
    assert raised.value.stalled == ("vllm_engine",) and not server.group_members()
    server = ts.TritonServer(tmp_path / "repo", exit_timeout_s=1)
    first_log = server.log_path
    with server.start(timeout_s=60, retries=1):
        assert server.log_path != first_log and real_ready(server)
    assert "tritonserver stalled during start-up, starting it again" in capsys.readouterr().err
