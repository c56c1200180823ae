"""The warning about deployments that ask for no GPU on a cluster with GPUs."""
import pytest

from capacity_builders import app, dep, nodes
from scripts.capacity import check_capacity

HIDE = {"env_vars": {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}}


def warned(report):
    return [(w.deployment, w.kind) for w in report.warnings]


def test_no_gpu_on_a_gpu_cluster_warns_without_failing():
    report = check_capacity(app(dep("router"), dep("engine", 1)), nodes(1))
    assert report.ok and not report.findings
    assert warned(report) == [("llm/router", "gpu_not_requested")]
    text = report.format_report()
    assert "Warnings:\n  - [gpu_not_requested] llm/router: asks for no GPU on a cluster with 1 GPU(s)" in text
    assert "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO" in text and "without GPUs" not in text
    assert text.endswith("Result: OK (every deployment fits at min and max replicas)")


def test_the_warning_names_the_nodes_without_gpus():
    report = check_capacity(app({"name": "spread", "num_replicas": 2, "max_replicas_per_node": 1}),
                            {"nodes": [{"name": "gpu", "CPU": 4, "GPU": 1}, {"name": "cpu", "CPU": 2}]})
    (warning,) = report.warnings
    assert "node without GPUs (cpu), where a KIND_GPU model cannot load" in warning.message


@pytest.mark.parametrize("deployment", [
    dep("engine", 0.5),
    dep("hidden", 0, runtime_env=HIDE),
    dep("hidden", runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}),
    {"name": "pg", "ray_actor_options": {"num_gpus": 0}, "placement_group_bundles": [{"CPU": 1}, {"GPU": 1}]},
])
def test_no_warning_when_the_gpu_is_requested_or_hidden(deployment):
    assert check_capacity(app(deployment), nodes(1)).warnings == ()


def test_no_warning_on_a_cluster_without_gpus():
    assert check_capacity(app(dep("router")), nodes(0)).warnings == ()
