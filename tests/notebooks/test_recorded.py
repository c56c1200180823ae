"""What no single notebook's check cell can assert (run after `pytest --nbval notebooks`).

One home per check: a notebook's final check cell asserts everything about what that notebook's
run did. It runs under papermill and nbval everywhere, GPU runs included, so an executed copy whose
check cell passed is the proof; a check of one run's values does not belong here as well. This file
keeps only:

* facts across notebooks, read from the values the check cells recorded under ``build/results/``
  (``scripts.results``): every notebook ran on the profile notebook 00 prepared. These run on this
  machine's build directory and on every GPU run kept under ``docs/gpu-runs/<machine>/build``; a
  notebook a GPU run did not execute is skipped there;
* for the executed copies committed under ``docs/gpu-runs/<machine>/``: each finished without an
  error output, and its check cell ran (an execution count, no error, "check passed" printed).

Expectations come from the profile each notebook ran with and the values it recorded, never from
this file's own copies of them.
"""
import json
import os

import pytest

from scripts import results
from scripts.paths import BUILD_DIR_ENV, REPO_ROOT
from scripts.profiles import load_profile


GPU_RUNS = sorted(p for p in (REPO_ROOT / "docs" / "gpu-runs").glob("*/build") if p.is_dir())
GPU_COPIES = sorted((REPO_ROOT / "docs" / "gpu-runs").glob("*/[0-9][0-9]_*.ipynb"))
NOTEBOOKS = ["01_build_engine", "02_fill_model_repository", "03_verify_engine", "04_launch_triton_server",
             "05_serve_with_ray", "06_troubleshoot_gpu_resources", "07_benchmark_and_monitor", "08_model_lifecycle"]


@pytest.fixture(params=[None, *GPU_RUNS], ids=["here", *(p.parent.name for p in GPU_RUNS)])
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
        return results.load(notebook)
    except FileNotFoundError:
        if os.environ.get(BUILD_DIR_ENV) in {str(p) for p in GPU_RUNS}:
            pytest.skip(f"this GPU run did not execute {notebook}")
        if reason := skipped_by_this_runs_profile(notebook):
            pytest.skip(f"this run's profile skips {notebook}: {reason}")
        raise


@pytest.mark.usefixtures("run_dir")
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_ran_on_one_profile(notebook):
    assert recorded(notebook)["profile"] == results.load("00_check_environment")["profile"]


def outputs_text(cell):
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o["output_type"] == "stream")


@pytest.mark.parametrize("path", GPU_COPIES, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_gpu_copy_finished_and_its_check_cell_passed(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(cells) for o in c.get("outputs", [])
              if o["output_type"] == "error"]
    assert not errors, f"{path}: error outputs (code cell, exception): {errors}"
    check = [c for c in cells if "results.record(" in "".join(c["source"])]
    assert check, f"{path}: no check cell (one that calls results.record)"
    assert check[-1]["execution_count"] is not None, f"{path}: the check cell did not run"
    assert "check passed" in outputs_text(check[-1]), f"{path}: the check cell did not print 'check passed'"
