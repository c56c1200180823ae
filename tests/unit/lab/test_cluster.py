"""scripts.lab.cluster against a real local Ray cluster."""
import os
import socket
import time
from pathlib import Path

import pytest

from scripts.lab.cluster import LocalCluster
from scripts.procs.process_guard import is_running


@pytest.mark.servers
def test_local_cluster_starts_on_loopback_and_leaves_nothing(monkeypatch):
    ray = pytest.importorskip("ray")
    from ray import serve

    import scripts.lab.cluster as cluster_module
    from scripts.procs.ports import free_port

    # The port chosen for Serve's proxy is taken before the proxy binds it: Serve starts on another.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    monkeypatch.setattr(cluster_module, "free_port", lambda: next(ports, None) or free_port())
    cluster = LocalCluster(num_cpus=1, num_gpus=2, override_resources={"accelerator_type:X": 1},
                           serve_env={"RAY_SERVE_SLOW_STARTUP_WARNING_S": "2"})
    with cluster:
        assert ray.cluster_resources()["GPU"] == 2 and ray.cluster_resources()["accelerator_type:X"] == 1
        assert cluster.base_url.startswith("http://127.0.0.1:") and cluster.port > 0 and cluster.pids
        assert cluster.port != taken.getsockname()[1]
        assert "RAY_OVERRIDE_RESOURCES" not in os.environ  # only the node started inside read it
        assert "RAY_SERVE_SLOW_STARTUP_WARNING_S" not in os.environ  # the caller's environment is left as it was
        environs = [Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") for pid in cluster.pids if is_running(pid)]
        assert environs and all(b"RAY_SERVE_SLOW_STARTUP_WARNING_S=2" in env for env in environs)  # the node's processes have it
        with pytest.raises(RuntimeError, match="already initialised"):
            LocalCluster(num_cpus=1).start()
        assert serve.status() is not None
    taken.close()
    assert not ray.is_initialized()
    assert not [p for p in cluster.pids if is_running(p)]


@pytest.mark.servers
def test_rays_messages_to_the_driver_go_to_a_file_not_to_stdout(capfd):
    """What ``serve.shutdown`` provokes in every notebook ("(raylet) Task ServeController.graceful_shutdown
    failed ...", in colour) is published to the driver the way this test publishes a message."""
    ray = pytest.importorskip("ray")
    from ray._private.utils import publish_error_to_driver

    import scripts.lab.cluster as cluster_module

    original = ray._private.worker.print_to_stdstream
    cluster = LocalCluster(num_cpus=1).start()
    try:
        assert cluster.messages_log.name == cluster_module.DRIVER_MESSAGES_LOG
        assert cluster.messages_log.parent == Path(ray._private.worker._global_node.get_logs_dir_path())
        publish_error_to_driver("test", "a message for the driver", ray._private.worker.global_worker.gcs_client)
        for _ in range(100):
            if cluster.messages_log.is_file() and "a message for the driver" in cluster.messages_log.read_text():
                break
            time.sleep(0.1)
    finally:
        left = cluster.stop()
    assert not left
    assert "(raylet) a message for the driver" in cluster.messages_log.read_text()
    out, err = capfd.readouterr()
    assert "a message for the driver" not in out + err and "\x1b[" not in out + err and "(raylet)" not in out + err
    assert ray._private.worker.print_to_stdstream is original  # the terminal gets them again after stop()


@pytest.mark.servers
def test_local_cluster_with_dashboard_and_metrics_port_on_loopback():
    ray = pytest.importorskip("ray")
    import requests

    from scripts.monitor.prometheus import ray_metrics_targets, ray_service_discovery_file
    from scripts.procs.ports import free_port

    port = free_port()
    cluster = LocalCluster(num_cpus=1, include_dashboard=True, metrics_export_port=port)
    assert LocalCluster(num_cpus=1).include_dashboard is False  # the default stays without a dashboard
    with cluster:
        assert cluster.dashboard_url.startswith("http://127.0.0.1:")
        assert requests.get(cluster.dashboard_url, timeout=10).status_code == 200
        assert [t.rsplit(":", 1)[1] for t in ray_metrics_targets()] == [str(port)]
        metrics = requests.get(f"http://{ray_metrics_targets()[0]}/metrics", timeout=10).text
        assert "ray_" in metrics
        assert ray_service_discovery_file().parent == Path(ray._private.worker._global_node.get_session_dir_path())
    assert not [p for p in cluster.pids if is_running(p)]


def test_a_node_that_timed_out_during_startup_is_started_again_and_its_processes_end():
    import subprocess
    import sys

    from scripts.lab.cluster import start_node_retrying

    started, shutdowns = [], []

    def init():
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        if len(started) == 1:
            raise Exception("The current node timed out during startup. This could happen because ...")
        return "context"

    assert start_node_retrying(init, lambda: shutdowns.append(1)) == "context"
    assert started[0].wait(timeout=10) is not None and started[1].poll() is None and shutdowns == [1]
    started[1].kill()
    started[1].wait()


def test_other_start_failures_are_raised_at_once():
    from scripts.lab.cluster import start_node_retrying

    calls = []

    def init():
        calls.append(1)
        raise RuntimeError("Ray is already initialised")

    with pytest.raises(RuntimeError, match="already initialised"):
        start_node_retrying(init, lambda: None)
    assert calls == [1]
