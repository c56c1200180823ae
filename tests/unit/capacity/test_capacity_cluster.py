"""scripts.capacity.cluster: cluster descriptions, a live Ray cluster (ray.nodes faked), anonymising."""
import sys
import types

import pytest

from capacity_builders import dep
from scripts.capacity import CapacityConfigError, Cluster, Node, check_capacity, cluster_from_ray, parse_cluster


@pytest.mark.parametrize("cluster, message", [
    ({"machines": []}, "lacks 'nodes'"),
    ({"nodes": []}, "nodes is empty"),
    ({"nodes": [{"name": "a", "GPU": 1}]}, "nodes[0] lacks 'CPU'"),
    ({"nodes": [{"CPU": 4, "GPU": 1.5}]}, "nodes[0].GPU must be a whole number >= 0, got 1.5"),
    ({"nodes": [{"CPU": -4}]}, "nodes[0].CPU must be a number >= 0, got -4"),
    ({"nodes": [{"CPU": 4, "gpu": 1}]}, "nodes[0] has unknown key(s) 'gpu'"),
    ({"nodes": [{"CPU": 4, "memory": "16 GB"}, {"CPU": 4, "memory": "16 Gigs"}]},
     "nodes[1].memory has an unknown memory unit"),
    ({"nodes": [{"CPU": 4, "resources": {"H100": "many"}}]}, "nodes[0].resources.H100 must be a number >= 0"),
])
def test_malformed_cluster(cluster, message):
    with pytest.raises(CapacityConfigError) as info:
        check_capacity([dep("A")], cluster)
    assert message in str(info.value)


def test_parse_cluster_defaults_and_accelerator_type():
    cluster = parse_cluster([{"CPU": 8, "GPU": 2, "accelerator_type": "A10G"}, {"name": "cpu-only", "CPU": 4}])
    first, second = cluster.nodes
    assert (first.name, first.gpu, first.memory) == ("node0", 2, None)
    assert first.resources == {"accelerator_type:A10G": 1.0} and cluster.has_resource("accelerator_type:A10G")
    assert (second.name, second.gpu) == ("cpu-only", 0) and cluster.total("CPU") == 12


def test_cluster_from_ray_reads_alive_nodes(monkeypatch):
    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: True
    fake.nodes = lambda: [
        {"NodeID": "abcdef0123", "Alive": True, "NodeManagerAddress": "10.0.0.1",
         "Resources": {"CPU": 8.0, "GPU": 2.0, "memory": 3.2e10, "object_store_memory": 1e10,
                       "node:10.0.0.1": 1.0, "accelerator_type:H100": 1.0}},
        {"NodeID": "dead", "Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 64.0, "GPU": 8.0}},
    ]
    monkeypatch.setitem(sys.modules, "ray", fake)
    cluster = cluster_from_ray()
    (node,) = cluster.nodes
    assert (node.name, node.cpu, node.gpu, node.memory) == ("10.0.0.1 (abcdef01)", 8.0, 2, 32_000_000_000)
    assert node.resources == {"node:10.0.0.1": 1.0, "accelerator_type:H100": 1.0}
    report = check_capacity([dep("T", 1, accelerator_type="H100", autoscale=(1, 3))], cluster)
    assert report.result("T").max_placed == 2 and "node:" not in report.cluster.format()


def test_cluster_from_ray_without_a_cluster_says_how_to_start_one(monkeypatch):
    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: False

    def init(**kwargs):
        raise ConnectionError("Could not find any running Ray instance")
    fake.init = init
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(CapacityConfigError, match=r"no running Ray cluster at auto .*ray start --head"):
        cluster_from_ray()


def test_anonymized_cluster_hides_names_and_memory():
    live = Cluster((Node("10.0.0.7 (ab12cd34)", 8, 2, 64 * 2**30, {"accelerator_type:H100": 1.0}),
                    Node("10.0.0.8 (ef56ab78)", 4)))
    shown = live.anonymized()
    assert [n.name for n in shown.nodes] == ["node0", "node1"] and all(n.memory is None for n in shown.nodes)
    assert shown.total("GPU") == 2 and shown.nodes[0].resources == {"accelerator_type:H100": 1.0}
    assert "10.0.0.7" not in shown.format() and "memory" not in shown.format()


def test_anonymized_cluster_orders_nodes_by_their_resources():
    from scripts.capacity import Cluster, Node
    shown = Cluster((Node("b", cpu=2), Node("a", cpu=8, gpu=2), Node("c", cpu=4))).anonymized()
    assert [(n.name, n.gpu, n.cpu) for n in shown.nodes] == [("node0", 2, 8), ("node1", 0, 4), ("node2", 0, 2)]


def test_absent_accelerator_type_is_one_no_node_has():
    from scripts.capacity import absent_accelerator_type
    from scripts.capacity.cluster import KNOWN_ACCELERATORS

    # An A100 host: Ray adds accelerator_type:A100, so the type to ask for must be another one.
    a100 = Cluster((Node("gpu", 8, 1, resources={"accelerator_type:A100": 1.0}), Node("cpu", 4)))
    assert a100.accelerator_types() == ["A100"]
    assert absent_accelerator_type(a100) not in a100.accelerator_types()
    picked = absent_accelerator_type(a100)
    assert not check_capacity([dep("P", 1, accelerator_type=picked)], a100).ok
    assert check_capacity([dep("P", 1, accelerator_type="A100")], a100).ok
    # logical GPUs: no accelerator_type at all
    assert absent_accelerator_type(Cluster((Node("n", 2, 2),))) == KNOWN_ACCELERATORS[0]
    # an override is kept when absent, refused when present
    assert absent_accelerator_type(a100, "H100") == "H100"
    with pytest.raises(ValueError, match="'A100' is present in this cluster"):
        absent_accelerator_type(a100, "A100")
    every = Cluster((Node("n", 2, 1, resources={f"accelerator_type:{a}": 1.0 for a in KNOWN_ACCELERATORS}),))
    with pytest.raises(ValueError, match="has every accelerator type"):
        absent_accelerator_type(every)
