"""Triton start failures on a real tritonserver (the nvidia-pytriton wheel's): each fails fast, with a
message that says what to fix (Triton's own log lines naming the problem), never a hang, and leaves
nothing behind: no process of the server's group, no /dev/shm file with its prefix."""
from __future__ import annotations

import contextlib
import re
import shutil
import socket
import time
from pathlib import Path

import pytest

from scripts import envcheck
from scripts.engine.config import ENGINE_CONFIG, write_engine_config
from scripts.profiles import load_profile
from scripts.procs.process_guard import live_group_members
from scripts.triton.repository.fill import RepoSettings, fill_for_profile
from scripts.triton.repository.lint import lint
from scripts.triton.server import TritonServer, TritonStartError

#: Seconds a failure may take on a busy two-core machine; the server is given as long to become
#: ready, so a hang ends as "not ready after", which the tests tell apart from an exit.
LIMIT_S = 60
#: The ensemble's engine model fails within seconds (before vLLM is imported), but Triton exits only
#: once the models loading beside it are loaded: preprocessing and postprocessing, whose tokenizers
#: took 10 s on an idle machine and 100 s on one running other tests.
ENSEMBLE_LIMIT_S = 150


def assert_nothing_left(server: TritonServer, groups: list[int] = ()) -> None:
    for pgid in {*groups, *([server.pid] if server.pid else [])}:
        assert not live_group_members(pgid), f"processes of group {pgid} survived the failed start"
    assert not list(Path("/dev/shm").glob(f"{server.command.shm_prefix}*"))


@contextlib.contextmanager
def fails_within(limit_s: float, expected=TritonStartError):
    """The body raises ``expected`` within ``limit_s`` seconds; yields pytest's ExceptionInfo."""
    start = time.monotonic()
    with pytest.raises(expected) as info:
        yield info
    elapsed = time.monotonic() - start
    assert elapsed < limit_s, f"the failure took {elapsed:.0f} s: {info.value}"


def failed_start(server: TritonServer, limit_s: float = LIMIT_S) -> str:
    """Start ``server``, which must exit on its own within ``limit_s``; returns the error's message.

    One retry, as a replica starts Triton: on two busy cores the Python backend of 2.51 can abort
    (``boost::interprocess::lock_exception``) before the failure under test is reached."""
    groups, start_once = [], server._start_once

    def start_and_note_the_group(timeout_s):
        try:
            return start_once(timeout_s)
        finally:
            groups.extend([server.pid] if server.pid else [])

    server._start_once = start_and_note_the_group
    try:
        with fails_within(limit_s) as info:
            server.start(timeout_s=limit_s, retries=1)
        message = str(info.value)
        # Triton gave up by itself (the launcher did not time out), with status 1, or crashing on its
        # way out with models still loaded (then not started again: it would fail the same)
        assert re.match(r"tritonserver exited with status -?\d+ before it was ready", message), message
        return message
    finally:
        assert_nothing_left(server, groups)


# -- the engine -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine_dir(cpu_build) -> Path:
    """The cpu profile's engine directory over the tiny Llama the folder's build holds (conftest.py)."""
    return load_profile("cpu", root=cpu_build).path("engine_dir")


@pytest.fixture
def engine_repo(engine_dir, build_root, tmp_path) -> tuple[Path, Path]:
    """A cpu repository filled as notebook 05 fills it, over this test's copy of the engine directory."""
    engine = shutil.copytree(engine_dir, tmp_path / "engine")
    repo = Path(fill_for_profile(load_profile("cpu"), RepoSettings(decoupled_mode=True), output_dir=tmp_path / "repo",
                                 engine_dir=engine)["repository"])
    assert f'string_value: "{engine}"' in (repo / "vllm_engine" / "config.pbtxt").read_text()
    return repo, engine / ENGINE_CONFIG


def test_a_missing_engine_config_fails_the_ensemble_and_names_the_step_to_run(engine_repo):
    repo, config = engine_repo
    config.unlink()
    server = TritonServer(repo, extra_args=("--model-control-mode=explicit", "--load-model=ensemble"))
    message = failed_start(server, ENSEMBLE_LIMIT_S)
    assert "load failed for model 'ensemble'" in message and "depends on 'vllm_engine'" in message, message
    assert f"EngineConfigError: {config.parent} holds no {ENGINE_CONFIG}: build the engine first" in message, message
    assert "read_engine_config" in message  # it failed reading the config, before vLLM was imported


def test_a_corrupt_engine_config_fails_the_engine_model_before_vllm_starts(engine_repo):
    repo, config = engine_repo
    config.write_text("{not json")
    server = TritonServer(repo, exit_timeout_s=1, extra_args=("--model-control-mode=explicit", "--load-model=vllm_engine"))
    message = failed_start(server)
    assert "load failed for model 'vllm_engine'" in message, message
    assert f"EngineConfigError: {config} is not valid JSON" in message and "notebook 01_build_engine" in message, message
    assert "read_engine_config" in message


# -- the server itself ----------------------------------------------------------------------------

def test_an_occupied_port_fails_fast_naming_the_address(build_root, tmp_path):
    (tmp_path / "repo").mkdir()
    server = TritonServer(tmp_path / "repo", exit_timeout_s=1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server.command.http_port = port
        message = failed_start(server)
    assert f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{port}' already in use" in message, message


@pytest.mark.parametrize("how", ["envcheck", "$TRITONSERVER"])
def test_a_missing_binary_says_how_to_install_it(build_root, tmp_path, monkeypatch, how):
    (tmp_path / "repo").mkdir()
    missing = tmp_path / "nowhere" / "tritonserver"
    if how == "envcheck":
        monkeypatch.setattr(envcheck, "triton_binary", lambda: missing)
    else:
        monkeypatch.setenv("TRITONSERVER", str(missing))
    server = TritonServer(tmp_path / "repo", exit_timeout_s=1)
    assert server.command.binary == missing
    with fails_within(LIMIT_S, envcheck.MissingComponent) as info:
        server.start(timeout_s=LIMIT_S)
    message = str(info.value)
    assert f"the tritonserver binary {missing} is missing" in message
    assert message.endswith("reinstall nvidia-pytriton==0.7.0 (env/setup_env.sh)"), message
    assert ("$TRITONSERVER names it" in message) == (how == "$TRITONSERVER")
    assert server.process is None
    assert_nothing_left(server)


def test_a_wheel_without_its_binary_is_reported_before_anything_starts(build_root, tmp_path, monkeypatch):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setattr(envcheck, "pytriton_root", lambda: tmp_path / "pytriton" / "tritonserver")
    (tmp_path / "repo").mkdir()
    with pytest.raises(envcheck.MissingComponent, match=r"bin/tritonserver is missing: reinstall nvidia-pytriton==0\.7\.0"):
        TritonServer(tmp_path / "repo")


# -- the repository -------------------------------------------------------------------------------

def test_an_unfilled_placeholder_is_a_parse_error_from_triton_and_from_the_linter(build_root, tmp_path):
    profile = load_profile("cpu")
    write_engine_config(profile)
    repo = Path(fill_for_profile(profile, RepoSettings(decoupled_mode=True), output_dir=tmp_path / "repo",
                                 models=["postprocessing"])["repository"])
    config = repo / "postprocessing" / "config.pbtxt"
    text, count = re.subn(r"^max_batch_size: \d+$", "max_batch_size: ${triton_max_batch_size}", config.read_text(),
                          flags=re.MULTILINE)
    assert count == 1
    config.write_text(text)
    line = text[:text.index("${")].count("\n") + 1

    problems = lint(repo)  # before Triton runs
    assert [(p.path, p.line, p.rule) for p in problems] == [(config, line, "parse")]
    assert "fill any ${...} left in it" in problems[0].fix

    server = TritonServer(repo, exit_timeout_s=1, extra_args=("--model-control-mode=explicit",
                                                              "--load-model=postprocessing"))
    message = failed_start(server)
    assert f"Error parsing text-format inference.ModelConfig: {line}:" in message and "Expected integer, got: $" in message
    assert f"failed to read text proto from {config}" in message, message


def test_a_model_that_raises_in_initialize_fails_the_start_with_its_error(build_root, tmp_path):
    model = tmp_path / "repo" / "broken"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n')
    (model / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('broken on purpose')\n")
    assert not lint(tmp_path / "repo")  # nothing a linter can see: the model fails only when it runs
    server = TritonServer(tmp_path / "repo", exit_timeout_s=1,
                          extra_args=("--model-control-mode=explicit", "--load-model=broken"))
    message = failed_start(server)
    assert "load failed for model 'broken'" in message and "RuntimeError: broken on purpose" in message, message
