"""Notebook 06's two-node case as a test of its own, on a real two-node Ray cluster (the notebook runs it
under nbval too; this one also checks that both nodes' processes end with the cluster). Long (about 45 s on
2 cores), so it runs in ``make test-full``, not ``make test``."""
import os

import pytest

from scripts.lab import gpu_conflicts as gc
from scripts.procs.process_guard import is_running


def test_second_node_without_gpus_hides_cuda_and_stops_with_the_cluster():
    ray = pytest.importorskip("ray")
    from ray import serve

    from scripts.lab.cluster import LocalCluster
    from scripts.lab.gpu_probe import GpuProbe
    from scripts.lab.serve_state import deploy, show_running

    cluster = LocalCluster(num_cpus=2, num_gpus=1).start()
    try:
        head = ray.get_runtime_context().get_node_id()
        cpu_node = cluster.add_node(num_cpus=1, env={"CUDA_VISIBLE_DEVICES": ""})
        assert cpu_node != head and ray.cluster_resources()["CPU"] == 3 and ray.cluster_resources()["GPU"] == 1
        assert os.environ.get("CUDA_VISIBLE_DEVICES") != ""  # the node's environment, not this process's
        deploy(GpuProbe, "spread", {"name": "Spread", "num_replicas": 2, "max_replicas_per_node": 1})
        show_running("spread", 2, 120)
        seen = {r["node_id"]: r for r in gc.replica_reports(cluster.base_url, "spread", 2)}
        assert set(seen) == {head, cpu_node}
        assert seen[head]["CUDA_VISIBLE_DEVICES"] is None and seen[cpu_node]["CUDA_VISIBLE_DEVICES"] == ""
        serve.delete("spread")
        accounted = {"name": "Accounted", "num_replicas": 1, "ray_actor_options": {"num_gpus": 1}}
        deploy(GpuProbe, "accounted", accounted)
        show_running("accounted", 1, 120)
        got = gc.replica_reports(cluster.base_url, "accounted", 1)[0]
        assert got["node_id"] == head and got["CUDA_VISIBLE_DEVICES"] == ",".join(got["ray_gpu_ids"]) and got["ray_gpu_ids"]
    finally:
        left = cluster.stop()
    assert not left and not [p for p in cluster.pids if is_running(p)]
