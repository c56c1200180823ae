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


def test_06_conflicts_reproduced_and_fixed():
    r, _ = recorded("06_troubleshoot_gpu_resources")
    gpus = r["gpus"]
    assert gpus >= 1
    assert r["findings"] == {"1": ["unschedulable_replica"], "2": ["max_replicas"], "3": ["min_replicas"],
                             "4": ["missing_resource"]}
    pending = r["pending"]
    assert set(pending) == {"1_pending", "2_pending", "3_pending", "4_pending"}
    assert pending["2_pending"].get("RUNNING") == gpus and pending["2_pending"].get("STARTING") == 1
    for key in ("1_pending", "3_pending", "4_pending"):
        assert pending[key] == {"STARTING": 1}
    for message in r["serve_messages"].values():
        assert "to be scheduled" in message and "Resources required for each replica" in message
    running = r["running"]
    assert running["2_fixed"] == running["3_holder"] == running["3_fixed_holder"] == gpus
    assert running["1_fixed"] == running["1_placement_group"] == running["4_fixed"] == 1
    assert running["override_too_big"] == running["override_picky"] == 1
    assert r["instance_count_loads"] == (r["instance_count"] <= r["max_safe_instance_count"])
    assert r["max_safe_instance_count_shared"] <= r["max_safe_instance_count"]
    # num_gpus: 0 sees the node's GPUs (no CUDA_VISIBLE_DEVICES); num_gpus: 1 gets its GPU; the override hides them
    no_gpu = r["no_gpu_replica"]
    assert no_gpu["cuda_visible_devices"] is None and no_gpu["hidden"] == "" and no_gpu["accounted"]
    # two nodes: the replica without num_gpus on the GPU-less node saw no GPU; with num_gpus only the head ran it
    assert set(r["two_nodes"]) == {"head", "cpu-node"} and r["two_nodes"]["cpu-node"]["cuda_visible_devices"] == ""
    assert r["two_nodes_fixed"] == ["head"]
    assert r["renamed_keys"] == ["max_concurrent_queries", "target_num_ongoing_requests_per_replica"]
    real = r["real_gpu"]
    assert (real is None) == bool(load_profile(r["profile"])["logical_gpus"])
    if real is not None:
        assert no_gpu["cuda_available"] and no_gpu["held_bytes"] > 0
        assert r["two_nodes"]["head"]["triton"].startswith("Triton ready")
        assert r["two_nodes"]["cpu-node"]["triton"].startswith("Triton did not load")
    if real is not None and "skipped_sections" in real:  # an engine that reserves a share of the total (vLLM)
        assert load_profile(r["profile"]).engine not in FRACTION_OF_FREE_ENGINES and real["skipped_sections"]
    elif real is not None:
        # two engines on one GPU: the second failed in CUDA exactly when the estimate said so; sized to their
        # share both ran, each holding its engine and a KV cache
        assert real["latecomer_status"] == ("RUNNING" if real["shared_predicted_fits"] else "DEPLOY_FAILED")
        assert real["shared_predicted_fits"] or "OutOfMemoryError" in real["latecomer_error"]
        assert all(b > real["shared_engine_bytes"] for b in real["shared_held_bytes"].values())
        # instance_group: "may fail" is either outcome; the safe fraction loaded every instance, each holding more
        # than its engine, all within the GPU
        assert real["instances_verdict"] == "may fail" or real["instances_loaded"] == (real["instances_verdict"] == "loads")
        if real["instances_fixed_fraction"] is not None:
            processes = engine_backend(load_profile(r["profile"]).engine).gpu_processes(real["instance_count"])
            assert real["instances_fixed_loaded"] and len(real["instance_bytes"]) == processes
            assert all(b > real["instance_engine_bytes"] for b in real["instance_bytes"])
            assert sum(real["instance_bytes"]) <= real["gpu_free_bytes"]


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
