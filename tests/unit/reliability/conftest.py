"""One real stack for the reliability tests of this folder: the cpu profile's decoupled repository
(as notebook 05 fills it), a real tritonserver with vLLM started by an owner process of its own
(tests/unit/reliability/owner.py, so a test can kill the owner), and the Serve application's routes
on a loopback port over that Triton (FastAPI and uvicorn, as in a replica; no Ray)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.engine.config import write_engine_config
from scripts.paths import BUILD_DIR_ENV, REPO_ROOT
from scripts.profiles import load_profile
from scripts.procs.process_guard import is_running
from scripts.triton.crashes import log_tail
from scripts.triton.repository.fill import RepoSettings, fill_for_profile

from fakes import install_model

OWNER = Path(__file__).with_name("owner.py")


@dataclass
class OwnedTriton:
    owner: subprocess.Popen
    repo: Path
    info: dict

    @property
    def http_url(self) -> str:
        return self.info["http_url"]

    def alive(self) -> bool:
        return self.owner.poll() is None and is_running(self.info["pid"])

    def state(self) -> str:
        """Whether the owner and its Triton still run, and the Triton log's tail: what a failure
        of a test over this stack needs to be read (a crash of Triton, or a stalled engine)."""
        return (f"owner {'running' if self.owner.poll() is None else f'exited with {self.owner.returncode}'}, "
                f"tritonserver {self.info['pid']} {'running' if is_running(self.info['pid']) else 'gone'}; "
                f"log {self.info['log']}:\n{log_tail(Path(self.info['log']), 30)}")


@pytest.fixture(scope="package")
def cpu_build(tmp_path_factory, tiny_llama) -> Path:
    """A build directory with the cpu profile's tiny Llama and its engine config, made once for the folder."""
    build = tmp_path_factory.mktemp("build")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BUILD_DIR_ENV, str(build))
        profile = load_profile("cpu")
        install_model(tiny_llama, profile)
        write_engine_config(profile)
    return build


@pytest.fixture(scope="package")
def owned_triton(cpu_build):
    build = cpu_build
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BUILD_DIR_ENV, str(build))
        profile = load_profile("cpu")
        repo = Path(fill_for_profile(profile, RepoSettings(decoupled_mode=True), output_dir=build / "repo")["repository"])
        owner = subprocess.Popen([sys.executable, str(OWNER), str(repo)], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                                 # an engine start of more than a second leaves its threads' stacks in the log
                                 env=os.environ | {BUILD_DIR_ENV: str(build), "TUTORIAL_ENGINE_STACKS_AFTER_S": "1"})
        try:
            line = owner.stdout.readline()
            if not line:
                pytest.fail(f"the owner of the test's tritonserver exited with {owner.wait()} before Triton was ready")
            yield OwnedTriton(owner, repo, json.loads(line))
        finally:
            if owner.poll() is None:
                owner.send_signal(signal.SIGTERM)  # atexit stops its Triton
                owner.wait(60)
