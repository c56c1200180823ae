"""scripts.lifecycle.versions and .failures without a server: the repository they write, the configs
they send, the broken copies and what the linter says of each, the permission checks, the copies."""
from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from scripts.engine.config import write_engine_config
from scripts.lifecycle import failures
from scripts.lifecycle.versions import (MODEL, Answer, Triton, file_config, fill_versioned_model, generate_route,
                                        require_text_model, version_policy, with_policy)
from scripts.paths import BUILD_DIR_ENV
from scripts.profiles import load_profile
from scripts.triton import server as ts
from scripts.procs.connections import established_to
from scripts.triton.repository.lint import lint
from fakes import json_http_server


@pytest.fixture
def versioned(tmp_path, monkeypatch):
    """A two-version ``lm`` filled for the cpu profile; the checkpoints are only named, not made."""
    monkeypatch.setenv(BUILD_DIR_ENV, str(tmp_path / "build"))
    profile = load_profile("cpu")
    write_engine_config(profile)
    checkpoints = {1: tmp_path / "ckpt1", 2: tmp_path / "ckpt2"}
    for path in checkpoints.values():
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"weights")
    repo = tmp_path / "repo"
    return profile, repo, fill_versioned_model(profile, repo, checkpoints), checkpoints


def test_the_versioned_model_names_one_checkpoint_per_version_and_lints_clean(versioned):
    _, repo, model_dir, checkpoints = versioned
    assert model_dir == repo / MODEL and sorted(p.name for p in model_dir.iterdir()) == ["1", "2", "config.pbtxt"]
    for version, checkpoint in checkpoints.items():
        arguments = json.loads((model_dir / str(version) / "model.json").read_text())
        assert arguments["model"] == arguments["tokenizer"] == str(checkpoint)
    assert not lint(repo)
    config = file_config(model_dir)
    assert config["name"] == MODEL and config["backend"] == "vllm" and config.get("max_batch_size", 0) == 0  # proto3 JSON omits 0
    assert "version_policy" not in config  # Triton's default (latest, 1) applies


def test_policies_as_triton_reads_them():
    assert version_policy("latest") == {"latest": {"num_versions": 1}}
    assert version_policy("all") == {"all": {}}
    assert version_policy("specific", [1]) == {"specific": {"versions": [1]}}
    with pytest.raises(ValueError, match="needs versions"):
        version_policy("specific")
    with pytest.raises(ValueError, match="use one of latest, all, specific"):
        version_policy("newest")
    with pytest.raises(ValueError, match="takes no versions"):
        version_policy("latest", [2])
    assert with_policy({"name": "m"}, "all") == {"name": "m", "version_policy": {"all": {}}}


def test_a_profile_without_a_text_model_is_refused_with_the_profile_to_use():
    with pytest.raises(SystemExit, match="a profile that has one"):
        require_text_model(load_profile("gpu-trtllm"))


@pytest.mark.parametrize("case, rule", [("syntax", "parse"), ("missing-file", "model-json-missing"), ("batch-size", "batch-size")])
def test_each_broken_copy_is_caught_by_the_linter(versioned, tmp_path, case, rule):
    _, _, model_dir, _ = versioned
    broken = tmp_path / "broken"
    name = failures.break_model(model_dir, broken, case)
    assert name == f"{MODEL}_{case.replace('-', '_')}"
    problems = [p for p in lint(broken) if p.path.is_relative_to(broken / name)]
    assert [p.rule for p in problems] == [rule], problems
    assert failures.lint_messages(broken, name) and case in failures.FIXES and case in failures.CAUSES
    with pytest.raises(ValueError, match="unknown case"):
        failures.break_model(model_dir, broken, "typo")


def test_a_copy_is_renamed_in_its_config(versioned, tmp_path):
    _, _, model_dir, _ = versioned
    copy = failures.copy_model(model_dir, tmp_path / "other", "lm_copy")
    assert 'name: "lm_copy"' in (copy / "config.pbtxt").read_text() and not lint(tmp_path / "other")


def test_the_permission_preflight_finds_what_another_user_cannot_read(versioned):
    _, _, model_dir, checkpoints = versioned
    paths = failures.served_paths(model_dir)
    assert paths == [model_dir, checkpoints[1], checkpoints[2]]
    os.chmod(checkpoints[2] / "model.safetensors", 0o600)
    user = "nobody"
    assert failures.unreadable_for(user, paths) == [checkpoints[2] / "model.safetensors"]
    failures.close_to(model_dir, user)  # another user owns it: owner-only modes
    assert stat.S_IMODE(model_dir.stat().st_mode) == 0o700 and stat.S_IMODE((model_dir / "config.pbtxt").stat().st_mode) == 0o600
    assert model_dir in failures.unreadable_for(user, paths)
    failures.make_readable(model_dir)
    failures.make_readable(checkpoints[2])
    assert failures.unreadable_for(user, paths) == []
    assert stat.S_IMODE(model_dir.stat().st_mode) == 0o755


class _Polled:
    """A polling server as a client sees it: an empty version folder is LOADING for a few polls, then
    UNAVAILABLE; once it holds files it loads. ``polls_to_fail``: how slow the server is to give up."""

    def __init__(self, folder: Path, polls_to_fail: int):
        self.folder, self.polls_to_fail, self.polls = folder, polls_to_fail, 0

    def states(self, name):
        self.polls += 1
        if not self.folder.is_dir():
            return {"1": "READY"}
        if list(self.folder.iterdir()):
            return {"1": "UNLOADING", "2": "READY"}
        return {"1": "READY", "2": "UNAVAILABLE" if self.polls > self.polls_to_fail else "LOADING"}

    def ask(self, prompt, name, max_tokens):
        return type("A", (), {"version": 2 if self.folder.is_dir() and list(self.folder.iterdir()) else 1})()


@pytest.mark.parametrize("polls_to_fail", [1, 50])
def test_a_half_copy_completes_only_after_the_server_reported_the_empty_folder_unavailable(versioned, tmp_path, polls_to_fail):
    """However slow the server is to try the empty folder, the copier waits for its UNAVAILABLE
    (observed, never a fixed delay), then copies, then waits for READY."""
    _, _, model_dir, _ = versioned
    target = tmp_path / "polled" / "2"
    target.parent.mkdir()
    server = _Polled(target, polls_to_fail)
    watch = failures.VersionWatch(server, "lm", "p")
    seen = failures.half_copy(watch, model_dir / "2", target, timeout_s=5, poll_s=0.01)
    states = [s["states"].get("2") for s in seen]
    assert states == ["LOADING", "UNAVAILABLE", "READY"], seen
    assert [what for _, what in watch.steps] == ["created 2/ (empty)", "copied model.json"]
    unavailable_at = next(s["t"] for s in seen if s["states"].get("2") == "UNAVAILABLE")
    assert watch.steps[1][0] >= unavailable_at and seen[-1]["answered"] == 2
    assert [p.name for p in target.iterdir()] == ["model.json"]


def test_a_half_copy_that_is_never_tried_times_out_saying_what_it_waited_for(versioned, tmp_path):
    _, _, model_dir, _ = versioned
    target = tmp_path / "polled" / "2"
    target.parent.mkdir()
    server = _Polled(target, polls_to_fail=10**6)
    watch = failures.VersionWatch(server, "lm_polled", "p", log_tail=lambda: "I1207 poll done")
    with pytest.raises(TimeoutError, match=r"(?s)version 2 of 'lm_polled' to be UNAVAILABLE \(the server tries the empty "
                                           r"folder and fails\).*LOADING.*I1207 poll done"):
        failures.half_copy(watch, model_dir / "2", target, timeout_s=0.3, poll_s=0.01)
    assert not list(target.iterdir())  # never completed: the lesson's state was not reached


def test_an_atomic_copy_shows_all_at_once(versioned, tmp_path):
    _, _, model_dir, _ = versioned
    other = tmp_path / "polled" / "3"
    other.parent.mkdir()
    failures.atomic_copy(model_dir / "2", other)
    assert [p.name for p in other.iterdir()] == ["model.json"] and not list(tmp_path.glob("polled/.*"))


def test_triton_messages_lose_the_traceback_and_logs_keep_the_error_lines():
    message = "load failed for model 'lm_x': version 2 is at UNAVAILABLE state: Internal: E\n\nAt:\n  /x/model.py(91): initialize\n"
    assert failures.first_line(message) == "load failed for model 'lm_x': version 2 is at UNAVAILABLE state: Internal: E"
    assert failures.first_line("") == ""
    log = "I1 server started\n| lm | 1 | READY |\nE1 failed to open directory /r/lm\n"
    assert failures.error_lines(log) == ["E1 failed to open directory /r/lm"]


def test_a_broken_load_is_explained_only_by_its_own_cause():
    answer = "failed to load 'lm_syntax', failed to poll from model repository"
    log = ['model_repository_manager.cc:1460] "Poll failed for model directory \'lm_syntax\': failed to read text proto from x"']
    assert failures.explained("syntax", answer, log) and not failures.explained("syntax", answer, [])
    assert not failures.explained("missing-file", "failed to connect: connection refused", [])


def test_error_lines_read_the_same_whatever_the_pid_and_time():
    """A line cut to a width must not depend on the digits of a thread id or PID (nbval compares it)."""
    lines = ["E1204 16:28:25.841686 26217 model_lifecycle.cc:642] \"failed to load 'lm' version 2\"",
             "E1204 09:01:02.000001 1234567 model_lifecycle.cc:642] \"failed to load 'lm' version 2\"",
             "\x1b[0;36m(Worker pid=19976)\x1b[0;0m \x1b[1;31mERROR\x1b[0m 12-04 19:28:48 FileNotFoundError: No such file",
             "\x1b[0;36m(Worker pid=7)\x1b[0;0m \x1b[1;31mERROR\x1b[0m 12-04 19:28:48 FileNotFoundError: No such file"]
    got = failures.error_lines("\n".join(lines))
    assert got[0] == got[1] == "model_lifecycle.cc:642] \"failed to load 'lm' version 2\""
    assert got[2] == got[3] == "(Worker) ERROR 12-04 19:28:48 FileNotFoundError: No such file"


class _Versions:
    """A polled server as watch_versions sees it: version 2 fails once, then loads."""

    def __init__(self):
        self.calls = 0

    def states(self, name):
        self.calls += 1
        return {1: {"1": "READY", "2": "UNAVAILABLE"}, 2: {"1": "READY", "2": "LOADING"}}.get(self.calls, {"1": "UNLOADING", "2": "READY"})

    def ask(self, prompt, name, max_tokens):
        return type("A", (), {"version": 2 if self.calls >= 3 else 1})()


def test_watch_versions_keeps_the_changes_only_and_stops_when_ready():
    seen = failures.watch_versions(_Versions(), "lm", "p", until_ready="2", timeout_s=5, poll_s=0.01)
    assert [s["states"]["2"] for s in seen] == ["UNAVAILABLE", "LOADING", "READY"] and seen[-1]["answered"] == 2


def test_a_server_run_as_another_user_drops_root_with_setpriv():
    cmd = ts.ServerCommand(model_repo=Path("/r"), http_port=1, grpc_port=2, metrics_port=3, backend_dir=Path("/b"),
                           shm_prefix="tut_", binary=Path("/x/tritonserver"), run_as="nobody", home=Path("/h"))
    argv = cmd.argv()
    assert argv[:2] == ["setpriv", "--reuid=65534"] and argv[3] == "--clear-groups" and argv[4] == "/x/tritonserver"
    assert cmd.environment({})["HOME"] == "/h"
    assert ts.ServerCommand(model_repo=Path("/r"), http_port=1, grpc_port=2, metrics_port=3, backend_dir=None,
                            shm_prefix="t_", binary=Path("/x/tritonserver")).argv()[0] == "/x/tritonserver"
    with pytest.raises(ValueError, match="one rank only"):
        ts.ServerCommand(model_repo=Path("/r"), http_port=1, grpc_port=2, metrics_port=3, backend_dir=None,
                         shm_prefix="t_", binary=Path("/x/tritonserver"), run_as="nobody", world_size=2).argv()
    with pytest.raises(KeyError, match="no user 'no-such-user'"):
        ts.user_entry("no-such-user")


def test_the_vllm_backend_gives_a_text_model_max_batch_size_0_and_refuses_more(monkeypatch):
    spec = importlib.util.find_spec("pytriton")
    utils = Path(spec.origin).parent / "tritonserver" / "backends" / "python" / "triton_python_backend_utils.py"
    if not utils.is_file():
        pytest.skip("the nvidia-pytriton wheel's Python-backend utilities are not installed")
    pb_spec = importlib.util.spec_from_file_location("triton_python_backend_utils", utils)
    pb_utils = importlib.util.module_from_spec(pb_spec)
    try:
        pb_spec.loader.exec_module(pb_utils)
    except ImportError as exc:  # it imports the stub's c_python_backend_utils where it can
        pytest.skip(f"triton_python_backend_utils needs the stub: {exc}")
    monkeypatch.setitem(__import__("sys").modules, "triton_python_backend_utils", pb_utils)
    from scripts.triton.backend import vllm_backend

    text = {"name": "lm", "max_batch_size": 8, "input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}], "output": []}
    with pytest.raises(ValueError, match="max_batch_size 8, but in auto-complete-config function for model 'lm' specified max_batch_size 0"):
        vllm_backend.TritonPythonModel.auto_complete_config(pb_utils.ModelConfig(json.dumps(text)))
    ok = vllm_backend.TritonPythonModel.auto_complete_config(pb_utils.ModelConfig(json.dumps(text | {"max_batch_size": 0})))
    assert ok.as_dict()["max_batch_size"] == 0
    tokens = {"name": "e", "max_batch_size": 64, "input": [{"name": "input_ids", "data_type": "TYPE_INT32", "dims": [-1]}], "output": []}
    assert vllm_backend.TritonPythonModel.auto_complete_config(pb_utils.ModelConfig(json.dumps(tokens))).as_dict()["max_batch_size"] == 64


def _triton_answer(path, body):
    if path.endswith("/load") and "bad" in path:
        return 400, {"error": "failed to load 'bad'"}
    if "/models/gone/" in path:
        return 502, b"<html><body>Bad Gateway</body></html>"  # a proxy's page: no JSON
    return 200, ({"model_version": "2", "text_output": "hi"} if path.endswith("/generate") else {})


def test_the_http_client_builds_versioned_routes():
    with json_http_server(_triton_answer) as (url, calls):
        triton = Triton(url)
        answer = triton.ask("p", version=2, max_tokens=3)
        assert calls[0][0] == "/v2/models/lm/versions/2/generate" and answer.version == 2 and answer.text == "hi"
        assert json.loads(calls[0][1]["sampling_parameters"]) == {"max_tokens": 3, "temperature": 0}
        assert triton.load(config={"name": "lm"}).ok
        assert calls[1] == ("/v2/repository/models/lm/load", {"parameters": {"config": '{"name": "lm"}'}})
        refused = triton.load("bad")
        assert (refused.ok, refused.status, refused.error) == (False, 400, "failed to load 'bad'")
        assert generate_route("lm", None, "ready") == "/v2/models/lm/ready"
        assert triton.ask("p", name="gone") == Answer(502, None, "", "<html><body>Bad Gateway</body></html>")


def test_a_private_copy_has_its_own_checkpoints_with_owner_only_weights(versioned, tmp_path):
    _, _, model_dir, checkpoints = versioned
    os.chmod(checkpoints[1] / "model.safetensors", 0o644)  # an earlier fix of the original changes nothing
    copy = failures.private_copy(model_dir, tmp_path / "private", "lm_private", "nobody")
    named = [Path(json.loads((copy / v / "model.json").read_text())["model"]) for v in ("1", "2")]
    assert all(p.parent == tmp_path / "private" / "checkpoints" for p in named)
    assert all(stat.S_IMODE((p / "model.safetensors").stat().st_mode) == 0o600 for p in named)
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700 and stat.S_IMODE((checkpoints[1] / "model.safetensors").stat().st_mode) == 0o644
    assert set(failures.unreadable_for("nobody", failures.served_paths(copy))) >= {copy, *(p / "model.safetensors" for p in named)}


def test_a_copy_closed_to_its_own_owner_keeps_the_owner_out_until_made_readable(versioned, tmp_path):
    """What the permissions lesson does for a reader who is not root: the server runs as the reader,
    so the copy takes the owner's own read permission away (and the preflight, run by that owner,
    reports the folder it cannot look into, as the server cannot); make_readable and fresh_dir undo
    it without root. Run by root and by an ordinary user alike."""
    _, _, model_dir, checkpoints = versioned
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert failures.serving_user("nobody") == (("nobody", "nobody") if os.geteuid() == 0 else (me, None))
    copy = failures.private_copy(model_dir, tmp_path / "private", "lm_private", me)
    weights = [tmp_path / "private" / "checkpoints" / f"v{v}-{checkpoints[v].name}" / "model.safetensors" for v in (1, 2)]
    assert stat.S_IMODE(copy.stat().st_mode) == 0o300
    assert all(stat.S_IMODE(w.stat().st_mode) == 0o200 for w in weights)
    assert copy in failures.unreadable_for(me, failures.served_paths(copy))
    assert failures.unreadable_for(me, weights) == weights
    failures.make_readable(copy)  # step 2 of the lesson: the folder fixed, the weights still closed
    assert stat.S_IMODE(copy.stat().st_mode) == 0o755 and stat.S_IMODE((copy / "1").stat().st_mode) == 0o755
    assert failures.unreadable_for(me, failures.served_paths(copy)) == weights
    for w in weights:
        failures.make_readable(w)
    assert failures.unreadable_for(me, failures.served_paths(copy)) == []
    failures.close_to(copy, me)
    again = failures.fresh_dir(tmp_path / "private")  # an earlier run's closed copy is no obstacle
    assert again.is_dir() and not list(again.iterdir())


def _denied_to(user: str, *paths: Path) -> list[bool]:
    """Whether ``user`` really cannot list (folders) or read (files) each path: tried in a process of
    that user (setpriv, which needs root), not judged from mode bits."""
    code = ("import os, sys\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        os.listdir(p) if os.path.isdir(p) else open(p, 'rb').close()\n"
            "        print('read')\n"
            "    except PermissionError:\n"
            "        print('denied')\n")
    entry = pwd.getpwnam(user)
    out = subprocess.run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
                          "/usr/bin/python3", "-c", code, *map(str, paths)], capture_output=True, text=True, check=True)
    return [line == "denied" for line in out.stdout.split()]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="runs a process as another user: root and setpriv")
def test_the_lesson_for_a_reader_who_is_not_root_denies_that_reader_for_real(versioned):
    """Notebook 08 as an ordinary user serves as that user: the copy it owns must keep it out for real
    (the kernel refuses the owner, not only the mode bits say so), and the fix lets it in again."""
    _, _, model_dir, _ = versioned
    user = "nobody"
    home = Path(tempfile.mkdtemp(prefix="lesson-as-reader-", dir="/tmp"))  # a folder that user can reach
    try:
        home.chmod(0o755)
        copy = failures.private_copy(model_dir, home / "private", "lm_private", "root")  # made, then handed over
        weights = [Path(json.loads((copy / v / "model.json").read_text())["model"]) / "model.safetensors" for v in ("1", "2")]
        for path in [home / "private", *(home / "private").rglob("*")]:
            os.chown(path, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
        failures.make_readable(copy)
        failures.close_to(copy, user)  # the reader owns it: the reader's own read permission goes
        for w in weights:
            w.chmod(0o200)  # as private_copy leaves weights its user owns
        assert _denied_to(user, copy, *weights) == [True, True, True]
        assert {copy, *weights} <= set(failures.unreadable_for(user, failures.served_paths(copy)))
        failures.make_readable(copy)
        for w in weights:
            failures.make_readable(w)
        assert _denied_to(user, copy, *weights) == [False, False, False]
        assert failures.unreadable_for(user, failures.served_paths(copy)) == []
    finally:
        failures.make_readable(home)
        shutil.rmtree(home)


def test_the_client_keeps_no_connection_open_between_calls(build_root, tmp_path, capsys):
    """An open tritonclient would cost every stop the server's exit timeout (scripts.procs.connections)."""
    (tmp_path / "repo").mkdir()
    with ts.TritonServer(tmp_path / "repo", exit_timeout_s=2, extra_args=("--model-control-mode=explicit",)) as server:
        triton = Triton(server.http_url)
        assert triton.index() == [] and triton.states() == {}
        refused = triton.load("absent")
        assert not refused.ok and "failed to load 'absent'" in refused.error
        assert established_to(server.command.http_port) == 0
    assert "still open" not in capsys.readouterr().err
    assert "service connections" not in server.log_path.read_text()


ECHO_CONFIG = ('name: "echo"\nbackend: "python"\nmax_batch_size: 0\n'
               'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
               'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
               'instance_group [ { count: 1 kind: KIND_CPU } ]\n')


def test_a_load_that_finds_the_server_crashed_starts_it_again_with_what_was_loaded(build_root, tmp_path, capsys):
    """Triton 2.51's Python backend can abort during a load on a CPU-starved machine; a client holding
    the server starts it again, loads again what it had loaded (with the config it used), then the load."""
    model = tmp_path / "repo" / "echo"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(ECHO_CONFIG)
    (model / "1" / "model.py").write_text("class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    with ts.TritonServer(tmp_path / "repo", exit_timeout_s=2, extra_args=("--model-control-mode=explicit",)) as server:
        triton = Triton(server=server, timeout_s=120)
        assert triton.load("echo").ok and triton.states("echo") == {"1": "READY"}
        old_url, old_pid = triton.url, server.pid
        # The lock_exception ends it at once (std::terminate); SIGABRT from outside would not: tritonserver
        # handles that one and shuts down in order, answering meanwhile. SIGKILL ends it as abruptly.
        os.kill(old_pid, signal.SIGKILL)
        refused = triton.load("absent")  # the connection breaks: the server had crashed
        assert not refused.ok and "failed to load 'absent'" in refused.error, refused
        assert triton.url == server.http_url != old_url and server.pid != old_pid
        assert triton.states("echo") == {"1": "READY"} and list(triton.loaded) == ["echo"]
        assert len(triton.restarts) == 1 and "SIGKILL" in triton.restarts[0], triton.restarts
    assert "starting it again" in capsys.readouterr().err  # never silent


def test_a_load_that_stalls_starts_the_server_again_and_loads_once_more(build_root, tmp_path, capsys):
    """The other failure of 2.51 under CPU starvation: initialize() returned, the server never took the
    answer, the load waits forever. Here the model's first initialize() says it returned two minutes
    ago and hangs, which is what crashes.stalled_loads reads from the log; the second returns."""
    repo = tmp_path / "repo"
    for name in ("echo", "slow"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(ECHO_CONFIG.replace('"echo"', f'"{name}"'))
    (repo / "echo" / "1" / "model.py").write_text("class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    marker = tmp_path / "stalled-once"
    (repo / "slow" / "1" / "model.py").write_text(
        "import pathlib, time\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        f"        marker = pathlib.Path({str(marker)!r})\n"
        "        if not marker.exists():\n"
        "            marker.touch()\n"
        "            print(f\"vllm backend: initialize() of 'slow' returned at {time.time() - 120:.3f}\", flush=True)\n"
        "            time.sleep(3600)\n"
        "    def execute(self, requests):\n        return []\n")
    with ts.TritonServer(repo, exit_timeout_s=1, extra_args=("--model-control-mode=explicit",)) as server:
        triton = Triton(server=server, timeout_s=120)
        assert triton.load("echo").ok
        first_log = server.log_path
        loaded = triton.load("slow")
        assert loaded.ok and marker.exists() and server.log_path != first_log, loaded
        assert triton.states("echo") == {"1": "READY"} and triton.states("slow") == {"1": "READY"}
        assert len(triton.restarts) == 1 and triton.restarts[0].startswith("stalled: the load of slow"), triton.restarts
    assert "tritonserver stalled during a load, starting it again" in capsys.readouterr().err


def test_a_client_given_only_the_url_raises_when_the_server_is_gone(tmp_path):
    from scripts.procs.ports import free_port  # noqa: PLC0415

    with pytest.raises(Exception):
        Triton(f"http://127.0.0.1:{free_port()}", timeout_s=5).load("lm")
    with pytest.raises(ValueError, match="not both"):
        Triton()


def test_an_answer_shows_the_prompt_and_the_continuation_apart():
    # a text-in vLLM model answers prompt + continuation; one without a leading space ran into the prompt
    answer = Answer(200, 1, "Triton servesRay Serve takes the traffic", "", "Triton serves")
    assert answer.continuation == "Ray Serve takes the traffic"
    assert answer.format() == "version 1: 'Triton serves' + 'Ray Serve takes the traffic'"
    assert Answer(200, 2, "other text", "", "Triton serves").format() == "version 2: 'other text'"
    assert Answer(200, 2, "hi", "").format() == "version 2: 'hi'"
    assert Answer(404, None, "", "not found", "p").format() == "HTTP 404: not found"
