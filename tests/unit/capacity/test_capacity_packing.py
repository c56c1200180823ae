"""scripts.capacity.packing: first-fit-decreasing over nodes and individual GPUs, in fixed point."""
import pytest

from capacity_builders import app, dep, kinds, nodes
from scripts.capacity import check_capacity, parse_cluster, parse_serve_config
from scripts.capacity.packing import pack


def test_min_replicas_of_all_are_placed_before_any_max():
    # Each needs 1 GPU at start; the peak of each would take the other's GPU.
    report = check_capacity(app(dep("A", 1, autoscale=(1, 2)), dep("B", 1, autoscale=(1, 2))), nodes(2))
    assert [(d.min_placed, d.max_placed) for d in report.deployments] == [(1, 1), (1, 1)]
    assert kinds(report) == [("llm/A", "max_replicas"), ("llm/B", "max_replicas")]


def test_pack_counts_per_phase():
    specs = parse_serve_config(app(dep("A", 1, autoscale=(1, 3)), dep("B", 0.5, replicas=2)))
    at_start, at_peak, start_states, peak_states = pack(specs, parse_cluster(nodes(2, 1)), skip=set())
    assert at_start == [1, 2] and at_peak == [2, 2]
    assert sum(sum(st.gpus) for st in start_states) == 10_000  # 3 GPUs, 2 used at start
    assert sum(sum(st.gpus) for st in peak_states) == 0


def test_fractional_half_gpu_four_replicas_fit_on_two_gpus():
    assert check_capacity(app(dep("T", 0.5, replicas=4)), nodes(2)).ok
    report = check_capacity(app(dep("T", 0.5, replicas=4)), nodes(1, 1))
    assert report.ok and [n.replicas for n in report.nodes] == [{"llm/T": 2}, {"llm/T": 2}]


@pytest.mark.parametrize("cluster", [nodes(1, 1), nodes(2)], ids=["two-nodes-one-gpu", "one-node-two-gpus"])
def test_fractional_shares_do_not_span_gpus(cluster):
    # 5 x 0.4 = 2 GPUs in total, but a 0.4 share must come from one GPU: 0.8 per GPU, 4 replicas.
    report = check_capacity(app(dep("T", 0.4, autoscale=(2, 5))), cluster)
    result = report.result("T")
    assert (result.min_placed, result.max_placed) == (2, 4)
    (finding,) = report.findings
    (gpu,) = finding.shortages
    assert gpu.fragmented and gpu.free == pytest.approx(0.4) and gpu.largest_free == pytest.approx(0.2)
    assert "no node GPU has 0.4 free in one piece" in gpu.describe()
    assert "lower autoscaling_config.max_replicas to 4" in finding.fix and "num_gpus: 0.33" in finding.fix


def test_fixed_point_sums_are_exact():
    assert check_capacity([dep("T", 0.1, replicas=10, num_cpus=0.1)], {"nodes": [{"CPU": 1, "GPU": 1}]}).ok


def test_memory_and_per_node_limits():
    config = [dep("M", replicas=3, num_cpus=0, memory="24GiB")]
    report = check_capacity(config, {"nodes": [{"CPU": 4, "memory": "64GiB"}]})
    assert report.result("M").min_placed == 2 and report.findings[0].shortages[0].resource == "memory"
    capped = [dict(dep("C", replicas=3), max_replicas_per_node=1)]
    report = check_capacity(capped, nodes(0, 0))
    assert report.result("C").min_placed == 2 and "raise max_replicas_per_node (now 1)" in report.findings[0].fix


def test_placement_group_bundles_count_on_one_node():
    d = {"name": "LLM", "placement_group_bundles": [{"CPU": 1, "GPU": 1}, {"GPU": 1}],
         "placement_group_strategy": "STRICT_PACK"}
    assert check_capacity([d], nodes(2)).ok
    assert kinds(check_capacity([d], nodes(1, 1))) == [("LLM", "unschedulable_replica")]
