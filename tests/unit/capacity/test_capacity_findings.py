"""scripts.capacity.findings: what cannot be placed, the short resource, and the fix."""
from capacity_builders import app, dep, kinds, nodes
from scripts.capacity import check_capacity


def test_one_replica_needs_more_gpus_than_any_node():
    report = check_capacity(app(dep("Big", 4)), nodes(2))
    assert not report.ok
    (finding,) = report.findings
    assert finding.kind == "unschedulable_replica" and finding.deployment == "llm/Big"
    assert "GPU 4 on one node; the largest node has 2" in finding.message
    assert "lower num_gpus to 2" in finding.fix and "add a node with at least 4 GPU" in finding.fix
    assert report.result("Big").min_placed == 0 and not report.result("Big").schedulable


def test_replica_cannot_span_nodes_although_the_total_is_enough():
    report = check_capacity(app(dep("TwoGPU", 2)), nodes(1, 1))
    (finding,) = report.findings
    assert finding.kind == "unschedulable_replica"
    assert "the cluster has 2 in total, but a replica is one actor on one node" in finding.message


def test_max_replicas_beyond_the_cluster():
    report = check_capacity(app(dep("Triton", 1, autoscale=(1, 4), num_cpus=2)), nodes(2))
    result = report.result("Triton")
    assert result.min_fits and not result.max_fits
    assert (result.min_placed, result.max_placed) == (1, 2)
    (finding,) = report.findings
    assert finding.kind == "max_replicas"
    assert "only 2 of max_replicas=4 replicas fit" in finding.message
    (gpu,) = finding.shortages
    assert (gpu.resource, gpu.needed, gpu.free, gpu.short) == ("GPU", 2, 0, 2)
    assert "lower autoscaling_config.max_replicas to 2" in finding.fix
    assert "use num_gpus: 0.5" in finding.fix and "Triton memory estimate" in finding.fix


def test_two_deployments_compete_for_the_same_gpus():
    report = check_capacity(app(dep("A", 1, replicas=2), dep("B", 1, replicas=1)), nodes(2))
    assert report.result("A").ok and not report.result("B").min_fits
    (finding,) = report.findings
    assert finding.kind == "min_replicas" and finding.deployment == "llm/B"
    assert "only 0 of num_replicas=1" in finding.message and "never becomes healthy" in finding.message
    assert "competes with llm/A (holds GPU 2)" in finding.message
    assert "lower the replicas or num_gpus of the deployments it competes with" in finding.fix


def test_peak_findings_name_the_competitor():
    report = check_capacity(app(dep("A", 1, autoscale=(1, 2)), dep("B", 1, autoscale=(1, 2))), nodes(2))
    assert "competes with llm/B (holds GPU 1)" in report.findings[0].message


def test_accelerator_type_no_node_has():
    report = check_capacity(app(dep("Triton", 1, accelerator_type="H100")),
                            {"nodes": [{"name": "a", "CPU": 8, "GPU": 1, "accelerator_type": "A10G"}]})
    (finding,) = report.findings
    assert finding.kind == "missing_resource"
    assert "accelerator_type:H100 0.001, which no node declares" in finding.message
    assert "remove accelerator_type" in finding.fix and "accelerator_type:A10G" in finding.fix
    assert "ray start --resources='{\"accelerator_type:H100\": 1}'" in finding.fix


def test_accelerator_type_and_custom_resource_present():
    cluster = {"nodes": [{"name": "a", "CPU": 8, "GPU": 1,
                          "resources": {"accelerator_type:H100": 1, "triton_slot": 2}}]}
    config = app(dep("Triton", 1, accelerator_type="H100", resources={"triton_slot": 1}))
    assert check_capacity(config, cluster).ok
    report = check_capacity(app(dep("X", resources={"accelerator_type:H100": 0.001, "nvlink": 1})), nodes(1))
    assert kinds(report) == [("llm/X", "missing_resource")]
    assert "nvlink" in report.findings[0].message and "accelerator_type:H100" in report.findings[0].message


def test_gpu_request_on_a_cluster_without_gpus_says_start_ray_with_gpus():
    report = check_capacity([dep("Triton", 1)], {"nodes": [{"CPU": 4}]})
    (finding,) = report.findings
    assert finding.kind == "unschedulable_replica" and "declares no GPUs" in finding.message
    assert "ray start --num-gpus=N" in finding.fix and "ray.init(num_gpus=N)" in finding.fix


def test_resources_that_fit_apart_but_not_together():
    cluster = {"nodes": [{"name": "gpu", "CPU": 2, "GPU": 1}, {"name": "cpu", "CPU": 16}]}
    (finding,) = check_capacity([dep("T", 1, num_cpus=8)], cluster).findings
    assert finding.kind == "unschedulable_replica" and "no node has all of them" in finding.message
    assert "gpu lacks CPU" in finding.message and "cpu lacks GPU" in finding.message


def test_cpu_shortage_is_counted():
    report = check_capacity([dep("A", replicas=3)], {"nodes": [{"CPU": 2}]})
    assert report.result("A").min_placed == 2 and kinds(report) == [("A", "min_replicas")]
    (cpu,) = report.findings[0].shortages
    assert (cpu.resource, cpu.short) == ("CPU", 1)
    assert "add 1 CPU (in pieces of at least 1 per node)" in report.findings[0].fix
