"""Assert what the notebooks' check cells recorded (run after `pytest --nbval notebooks`).

Expectations come from the profile each notebook ran with and the parameters it recorded, never
from this file's own copies of them: a reader who runs a notebook with other parameters (or on
another profile) gets checks that still hold.

Each test runs on this machine's build directory and on every GPU run kept under
``docs/gpu-runs/<machine>/build`` (their recorded values and small files; no weights). A notebook
a GPU run did not execute is skipped there.
"""
import json
import os
from pathlib import Path

import pytest

from scripts import results
from scripts.capacity.instance_size import FRACTION_OF_FREE_ENGINES
from scripts.engine.config import read_engine_config
from scripts.paths import BUILD_DIR_ENV, REPO_ROOT, reference_path
from scripts.profiles import load_profile
from scripts.triton.backends import engine_backend
from scripts.triton.repository.fill import COMMON_MODELS
from scripts.triton.repository.lint import lint


GPU_RUNS = sorted(p for p in (REPO_ROOT / "docs" / "gpu-runs").glob("*/build") if p.is_dir())


@pytest.fixture(autouse=True, params=[None, *GPU_RUNS], ids=["here", *(p.parent.name for p in GPU_RUNS)])
def run_dir(request, monkeypatch):
    if request.param is not None:
        monkeypatch.setenv(BUILD_DIR_ENV, str(request.param))
    return request.param


def skipped_by_this_runs_profile(notebook):
    """Why the profile this build ran with (notebook 00's record) skips ``notebook``, or None."""
    try:
        profile = load_profile(results.load("00_check_environment")["profile"])
    except FileNotFoundError:
        return None
    return profile.skipped_notebooks().get(notebook)


def recorded(notebook):
    try:
        r = results.load(notebook)
    except FileNotFoundError:
        if os.environ.get(BUILD_DIR_ENV) in {str(p) for p in GPU_RUNS}:
            pytest.skip(f"this GPU run did not execute {notebook}")
        if reason := skipped_by_this_runs_profile(notebook):
            pytest.skip(f"this run's profile skips {notebook}: {reason}")
        raise
    return r, load_profile(r["profile"])


@pytest.mark.parametrize("notebook", ["00_check_environment", "03_verify_engine", "04_launch_triton_server"])
def test_every_notebook_ran_on_one_profile(notebook):
    assert results.load(notebook)["profile"] == results.load("00_check_environment")["profile"]
