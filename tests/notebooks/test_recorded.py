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


def test_07_every_target_measured_at_every_concurrency():
    r, _ = recorded("07_benchmark_and_monitor")
    saved = json.loads(results.local_path(r, r["results_json"]).read_text())
    rows = [row for row in saved["rows"] if row["repeat"] >= 0]
    assert saved["meta"]["smoke"] == r["smoke"] and saved["meta"]["concurrency"] == r["concurrency"]
    assert {(row["label"], row["concurrency"], row["repeat"]) for row in rows} == {
        (label, c, k) for label in r["targets"] for c in r["concurrency"] for k in range(r["repeats"])}
    assert all(row["failed"] == 0 and row["completed"] > 0 and row["error"] is None for row in rows)
    assert set(r["ratios"]) == {f"{label} @ {c}" for label in r["targets"] for c in r["concurrency"]}
    assert all(ratio > 0 for ratio in r["ratios"].values())
    larger = r.get("larger") or {}  # the larger model's ratios, measured in the full sweep only
    assert not (larger and r["smoke"]) and all(ratio > 0 for ratio in larger.values()), larger
    offline = r.get("offline")  # the engine alone, run in the full sweep only
    assert (offline is None) == r["smoke"] and (offline is None or offline["output_throughput"] > 0), offline
    if r["monitoring"]:
        from scripts.monitor.dashboard import panel_queries
        assert r["panels"] == len({title for title, _ in panel_queries(gpu=r.get("gpu_panels", False))})
    for gpu, peak in (r.get("gpu_peak") or {}).items():  # sampled with nvidia-smi on a GPU profile
        assert peak["memory_used_bytes"] > 0 and 0 <= peak["utilization_pct"] <= 100, (gpu, peak)


@pytest.mark.parametrize("notebook", ["00_check_environment", "03_verify_engine", "04_launch_triton_server"])
def test_every_notebook_ran_on_one_profile(notebook):
    assert results.load(notebook)["profile"] == results.load("00_check_environment")["profile"]


def test_08_no_request_failed_through_the_release_and_the_canary_held_its_share():
    r, _ = recorded("08_model_lifecycle")
    for phase in ("bluegreen", "promoted", "rollback"):
        assert r[phase]["failed"] == 0 and r[phase]["requests"] > 0, (phase, r[phase])
    assert set(r["bluegreen"]["by_version"]) == {"1", "2"}  # JSON keys
    assert "3" not in r["rollback"]["by_version"] and r["rollback"]["retried"] > 0, r["rollback"]
    assert abs(r["canary"]["share"] - r["canary"]["by_color"].get("green", 0) / (r["canary"]["requests"] - r["canary"]["failed"])) < 1e-9
    assert r["canary"]["tolerance"] > 0 and r["canary"]["failed"] == 0
