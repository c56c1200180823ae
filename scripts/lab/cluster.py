"""A local Ray cluster with Serve, for notebooks: started on 127.0.0.1, stopped with a check::

    cluster = LocalCluster(num_cpus=2).start()
    ...  # serve.run(...), requests to cluster.base_url
    assert not cluster.stop()

Why it is built this way, and the sources: docs/design/lab.md.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from scripts.lab import quiet_widget_notices
from scripts.profiles import bind_host
from scripts.procs.process_guard import still_running
from scripts.procs.ports import free_port

#: The file in the Ray session's log folder that takes the messages Ray pushes to this driver.
DRIVER_MESSAGES_LOG = "driver_messages.log"

#: Loggers whose INFO lines would bury a notebook's own output.
QUIET_LOGGERS = ("ray", "ray.serve", "ray.data", "ray.train", "ray.tune")


def quiet_ray_logging() -> None:
    """Ray and Serve log to the notebook at INFO; keep errors only (their logs stay in /tmp/ray)."""
    quiet_widget_notices()
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


class _MessagesToFile:
    """Stands in for ``ray._private.worker.print_to_stdstream`` while a cluster runs: appends what Ray
    would print to the driver's stdout (in colour) to a file, one line per message."""

    def __init__(self, path: Path, original: Any):
        self.path, self.original = path, original

    def __call__(self, data: Mapping[str, Any], ignore_prefix: bool = False) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            for line in data.get("lines", []):
                out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ({data.get('pid', '?')}) {line}\n")


def driver_messages_to_file() -> Path:
    """Send the messages Ray pushes to this driver to ``DRIVER_MESSAGES_LOG`` in the session's log folder.

    ``ray.init(log_to_driver=False)`` stops the workers' own output, but not these: every driver runs a
    thread (``listen_error_messages``, ray 2.60 ``ray/_private/worker.py``) that prints each message the
    cluster publishes for it (task retries, dead workers, ...) to stdout in colour, whatever
    ``log_to_driver`` says, and Ray writes them to no log file. ``serve.shutdown`` provokes two every time:
    the tasks the driver had in flight on Serve's controller fail when it is killed, and are retried.
    That thread looks ``print_to_stdstream`` up in its module on every message (the handler of
    ``log_to_driver`` holds its own reference), so replacing it there moves exactly these messages;
    :func:`driver_messages_to_terminal` puts it back. Returns the file's path.
    """
    import ray  # noqa: PLC0415

    worker_module = ray._private.worker
    node = worker_module._global_node
    if node is None:
        raise RuntimeError("start Ray first (ray.init)")
    path = Path(node.get_logs_dir_path()) / DRIVER_MESSAGES_LOG
    original = worker_module.print_to_stdstream
    original = getattr(original, "original", original)
    worker_module.print_to_stdstream = _MessagesToFile(path, original)
    return path


def driver_messages_to_terminal() -> None:
    """Undo :func:`driver_messages_to_file` (after ``ray.shutdown``, whose last messages it still caught)."""
    import ray  # noqa: PLC0415

    worker_module = ray._private.worker
    if isinstance(worker_module.print_to_stdstream, _MessagesToFile):
        worker_module.print_to_stdstream = worker_module.print_to_stdstream.original


def start_node_retrying(init: Callable[[], Any], shutdown: Callable[[], None], attempts: int = 2) -> Any:
    """``init()`` (``ray.init``), again when the node timed out during startup.

    On a busy machine (two notebooks at once, two cores) the node's dashboard agent, a Python process,
    can take longer to start than the raylet waits for it (about 15 s, ray 2.60: the raylet's log says
    "Timed out waiting for file .../metrics_agent_port_..."); ``ray.init`` then raises "The current
    node timed out during startup". The processes that attempt started are ended before the next."""
    import psutil  # noqa: PLC0415 - Ray's own dependency

    for _ in range(attempts - 1):
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        try:
            return init()
        except Exception as exc:
            if "timed out during startup" not in str(exc):
                raise
        shutdown()
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        for proc in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(started, timeout=10)  # reaps them: they are this process's children
    return init()


def ray_process_ids() -> list[int]:
    """PIDs of the processes this driver's ``ray.init`` started (GCS, raylet, ...)."""
    import ray  # noqa: PLC0415

    node = ray._private.worker._global_node
    if node is None:
        return []
    return sorted(info.process.pid for infos in node.all_processes.values() for info in infos
                  if getattr(info, "process", None) is not None)


@dataclass
class LocalCluster:
    """``ray.init`` of a new local cluster plus ``serve.start`` on a free port of 127.0.0.1.

    ``num_gpus`` declares logical GPUs (the CPU profile reproduces GPU conflicts with them); None
    lets Ray count the real ones. ``override_resources`` is what the node says it has
    (``RAY_OVERRIDE_RESOURCES``, e.g. ``{"GPU": 3}``); ``serve_env`` are environment variables the
    cluster's processes get (Serve's controller reads ``RAY_SERVE_SLOW_STARTUP_WARNING_S`` when it
    starts, ...); this process's environment is left as it was.
    ``include_dashboard`` starts the Ray Dashboard on a free port of 127.0.0.1 (:attr:`dashboard_url`);
    it also writes Ray's Prometheus service-discovery file (scripts/monitor/prometheus.py).
    ``metrics_export_port`` is the port of the node's metrics agent (``ray.init(_metrics_export_port=...)``,
    ray/_private/worker.py); None: a free one, which ``ray.nodes()`` reports as ``MetricsExportPort``.
    """

    num_cpus: int
    num_gpus: int | None = None
    override_resources: Mapping[str, float] | None = None
    serve_env: Mapping[str, str] = field(default_factory=dict)
    port: int = 0
    pids: list[int] = field(default_factory=list)
    nodes: list = field(default_factory=list)  # nodes added with add_node (ray._private.node.Node)
    include_dashboard: bool = False
    metrics_export_port: int | None = None
    dashboard_url: str | None = None
    messages_log: Path | None = None  # where Ray's messages to this driver go (driver_messages_to_file)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"  # reachable from inside, whichever address Serve binds

    def start(self) -> "LocalCluster":
        import ray  # noqa: PLC0415

        if ray.is_initialized():
            raise RuntimeError("Ray is already initialised in this process: stop that cluster first (ray.shutdown())")
        quiet_ray_logging()
        # The node's processes (raylet, and the workers it starts: Serve's controller, proxies and
        # replicas) take their environment from this process at ray.init; afterwards the caller's
        # environment is what it was (this kernel needs none of it).
        env = dict(self.serve_env) | ({"RAY_OVERRIDE_RESOURCES": json.dumps(dict(self.override_resources))}
                                      if self.override_resources else {})
        saved = {key: os.environ.pop(key, None) for key in [*env, "RAY_OVERRIDE_RESOURCES"]}
        os.environ.update(env)
        try:
            dashboard = {"dashboard_host": "127.0.0.1", "dashboard_port": free_port()} if self.include_dashboard else {}
            context = start_node_retrying(lambda: ray.init(
                address="local", num_cpus=self.num_cpus, num_gpus=self.num_gpus,
                include_dashboard=self.include_dashboard, _node_ip_address="127.0.0.1",
                logging_level=logging.ERROR, log_to_driver=False, configure_logging=True,
                _metrics_export_port=self.metrics_export_port, **dashboard), ray.shutdown)
            self.messages_log = driver_messages_to_file()
            self.pids = ray_process_ids()
            self.dashboard_url = f"http://{context.dashboard_url}" if self.include_dashboard and context.dashboard_url else None
            self.start_serve()
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None)
                if value is not None:
                    os.environ[key] = value
        quiet_ray_logging()  # serve.start configures its logger again
        return self

    def start_serve(self, attempts: int = 3) -> None:
        """``serve.start`` with its HTTP proxy on a free port; another port if that one was taken
        between the choice and the proxy's bind (Ray: "Failed to bind to address ...")."""
        from ray import serve  # noqa: PLC0415

        for attempt in range(1, attempts + 1):
            self.port = free_port()
            try:
                serve.start(http_options={"host": bind_host(), "port": self.port})
                return
            except Exception as exc:  # RayTaskError(RuntimeError) from the proxy actor
                if "Failed to bind" not in str(exc) or attempt == attempts:
                    raise
                serve.shutdown()

    def add_node(self, num_cpus: int, num_gpus: int = 0, env: Mapping[str, str] | None = None) -> str:
        """Start a second Ray node on this host, joined to this cluster; its node id.

        What ``ray start --address <head> --num-cpus N --num-gpus 0`` does on another machine, here with
        the node's processes owned by this one (as ``ray.cluster_utils.Cluster.add_node`` starts them,
        ray 2.60) so that :meth:`stop` ends them by handle. ``env`` is set for the node's processes
        only: ``{"CUDA_VISIBLE_DEVICES": ""}`` makes it a node without GPUs on a GPU machine, since
        workers inherit their raylet's environment.
        """
        import ray  # noqa: PLC0415
        from ray._private.node import Node  # noqa: PLC0415
        from ray._private.parameter import RayParams  # noqa: PLC0415

        head = ray._private.worker._global_node
        if head is None:
            raise RuntimeError("start the cluster first (LocalCluster.start())")
        params = RayParams(gcs_address=head.gcs_address, node_ip_address="127.0.0.1", num_cpus=num_cpus,
                           num_gpus=num_gpus, object_store_memory=150 * 2**20, min_worker_port=0, max_worker_port=0,
                           include_log_monitor=False, node_manager_port=0)
        params.dashboard_agent_listen_port = None
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            node = Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        self.nodes.append(node)
        self.pids += sorted(info.process.pid for infos in node.all_processes.values() for info in infos
                            if getattr(info, "process", None) is not None)
        deadline = time.monotonic() + 60
        while not any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the added node {node.node_id} did not join the cluster within 60 s")
            time.sleep(0.5)
        return node.node_id

    def stop(self, extra_pids: list[int] | tuple[int, ...] = (), timeout_s: float = 10.0) -> list[int]:
        """Shut Serve and Ray down; the PIDs (Ray's own and ``extra_pids``) still alive afterwards."""
        import ray  # noqa: PLC0415
        from ray import serve  # noqa: PLC0415

        if ray.is_initialized():
            serve.shutdown()
        for node in self.nodes:
            node.kill_all_processes(check_alive=False, allow_graceful=True)
        self.nodes.clear()
        if ray.is_initialized():
            ray.shutdown()
        driver_messages_to_terminal()
        return still_running(sorted(set(self.pids) | set(extra_pids)), timeout_s)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        left = self.stop()
        if left and exc[0] is None:
            raise RuntimeError(f"Ray processes left after shutdown: {left}")
