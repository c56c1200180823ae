"""Reproduce Ray Serve GPU-resource conflicts and read what Ray and Serve say about them.

Used by ``notebooks/06_troubleshoot_gpu_resources.ipynb``. A deployment is described once, as the
dict a ``serve build`` config holds (``name``, ``num_replicas`` or ``autoscaling_config``,
``ray_actor_options``, ``placement_group_bundles``, ...). The same dict feeds the capacity checker
(:mod:`scripts.capacity`, before deploying) and :func:`deployment_options` (``.options(**)`` of
the real deployment), so what the checker judged is exactly what Ray schedules.

After deploying, :func:`show_pending`, :func:`show_running` and :func:`show_failed` wait with
:func:`scripts.clients.serve_status.wait_for_app` until some replicas still pend with Serve's "taken
more than ...s to be scheduled" message, all run, or the application failed, and print the state's
stable facts. :func:`pending_demands` reads the autoscaler's view of what cannot be placed (the
"Demands" of ``ray status``). :data:`DIRECT_INGRESS_ENV` and :func:`ingress_urls` are direct
ingress (notebook 07); :func:`all_distinct` checks that replicas own what they should (notebook 05).
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from scripts.clients.serve_status import AppState, all_running, deploy_failed, pending_with_message, wait_for_app


#: Keys of a deployment dict that map onto ``Deployment.options``.
DEPLOYMENT_KEYS = ("name", "num_replicas", "autoscaling_config", "ray_actor_options", "max_replicas_per_node",
                   "placement_group_bundles", "placement_group_strategy")


class ConflictSetupError(ValueError):
    """A deployment dict that cannot become a Serve deployment; the message says which key."""


def serve_config(app: str, *deployments: Mapping[str, Any], route_prefix: str | None = None) -> dict:
    """A one-application config in the ``serve build`` format (what the capacity checker reads)."""
    if not deployments:
        raise ConflictSetupError(f"application {app!r} needs at least one deployment")
    return {"applications": [{"name": app, "route_prefix": route_prefix or f"/{app}",
                              "import_path": f"notebook:{app}", "deployments": [dict(d) for d in deployments]}]}


def merge_configs(*configs: Mapping[str, Any]) -> dict:
    """Several ``serve_config`` results as one config (applications deployed side by side)."""
    return {"applications": [a for c in configs for a in c["applications"]]}


def deployment_options(deployment: Mapping[str, Any]) -> dict:
    """``Deployment.options(**kwargs)`` for a deployment dict of a Serve config."""
    unknown = sorted(set(deployment) - set(DEPLOYMENT_KEYS))
    if unknown:
        raise ConflictSetupError(f"unknown deployment key(s) {', '.join(map(repr, unknown))}: use {', '.join(DEPLOYMENT_KEYS)}")
    if "name" not in deployment:
        raise ConflictSetupError("the deployment dict lacks 'name'")
    options = {k: v for k, v in deployment.items() if v is not None}
    if "ray_actor_options" in options:
        options["ray_actor_options"] = dict(options["ray_actor_options"])
    if "autoscaling_config" in options:
        options["autoscaling_config"] = dict(options["autoscaling_config"])
    if "placement_group_bundles" in options:
        options["placement_group_bundles"] = [dict(b) for b in options["placement_group_bundles"]]
    return options


def show_pending(app: str, timeout_s: float, running: int = 0) -> tuple[AppState, float]:
    """Wait until ``running`` replicas run and Serve says why the others wait; print the state."""
    state, waited = wait_for_app(app, pending_with_message(running), timeout_s)
    print(state.format())
    return state, waited


_ERROR_LINE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception)): (.*?)(?=\s+File \"|$)")


def failure_reason(message: str) -> str:
    """The last exception line of a DEPLOY_FAILED message (Serve includes the constructor's traceback)."""
    matches = _ERROR_LINE.findall(message)
    return f"{matches[-1][0]}: {matches[-1][1]}" if matches else message[-300:]


def show_failed(app: str, timeout_s: float) -> tuple[AppState, float]:
    """Wait until Serve marks ``app`` DEPLOY_FAILED; print its status and the constructor's error."""
    state, waited = wait_for_app(app, deploy_failed, timeout_s)
    print(f"application {state.app}: {state.app_status}")
    print(f"deployment {state.deployment}: {state.deployment_status}")
    print("error: " + failure_reason(state.message))
    return state, waited


def show_running(app: str, replicas: int, timeout_s: float) -> tuple[AppState, float]:
    """Wait until ``replicas`` replicas run; print the state."""
    state, waited = wait_for_app(app, all_running(replicas), timeout_s)
    print(state.format())
    return state, waited


# -- what the autoscaler sees (`ray status`) -------------------------------------------------

def _clean_bundle(bundle: Mapping[str, float]) -> dict[str, float]:
    """A resource bundle without Ray's per-node ``node:<ip>`` keys, amounts as plain floats."""
    return {k: float(v) for k, v in sorted(bundle.items()) if not k.startswith("node:")}


def demands_from_status(cluster_status: Any) -> list[tuple[dict[str, float], int]]:
    """``[(bundle, count)]`` of tasks/actors and placement groups the cluster cannot place now,
    from an autoscaler v2 ``ClusterStatus``."""
    out: dict[tuple, int] = {}
    demands = cluster_status.resource_demands
    for demand in list(demands.ray_task_actor_demand) + list(demands.placement_group_demand):
        for by_count in demand.bundles_by_count:
            key = tuple(_clean_bundle(by_count.bundle).items())
            out[key] = out.get(key, 0) + int(by_count.count)
    return [(dict(k), n) for k, n in sorted(out.items())]


def pending_demands(gcs_address: str | None = None) -> list[tuple[dict[str, float], int]]:
    """The pending resource demands of the running cluster, as ``ray status`` lists them."""
    import ray  # noqa: PLC0415
    from ray.autoscaler.v2.sdk import get_cluster_status  # noqa: PLC0415

    address = gcs_address or ray.get_runtime_context().gcs_address
    return demands_from_status(get_cluster_status(address))


def wait_for_demands(timeout_s: float = 30.0, poll_s: float = 0.5,
                     demands_fn: Callable[[], list] | None = None) -> list[tuple[dict[str, float], int]]:
    """The pending demands once the autoscaler reports some (it refreshes every second or so), or
    ``[]`` after ``timeout_s``."""
    demands_fn = demands_fn or pending_demands
    deadline = time.monotonic() + timeout_s
    while True:
        demands = demands_fn()
        if demands or time.monotonic() > deadline:
            return demands
        time.sleep(poll_s)


def format_demands(demands: Iterable[tuple[Mapping[str, float], int]]) -> str:
    """``ray status``'s "Demands" section: ``{'CPU': 1.0, 'GPU': 3.0}: 1+ pending tasks/actors``."""
    lines = [f" {dict(bundle)}: {count}+ pending tasks/actors" for bundle, count in demands]
    return "Demands:\n" + ("\n".join(lines) if lines else " (no resource demands)")


def pending_replica_actors(actor_table: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Class names of the Serve replica actors Ray has not placed yet (state ``PENDING_CREATION``,
    as ``ray list actors --filter state=PENDING_CREATION`` shows), from the GCS actor table
    (``ray._private.state.actors()``; the state API would need the dashboard)."""
    if actor_table is None:
        import ray  # noqa: PLC0415

        actor_table = ray._private.state.actors()
    return sorted(a["ActorClassName"] for a in actor_table.values()
                  if a.get("State") == "PENDING_CREATION" and str(a.get("ActorClassName", "")).startswith("ServeReplica"))


def controller_log_lines(pattern: str = "to be scheduled", log_dir: str | Path | None = None,
                         limit: int = 3) -> list[str]:
    """The last ``limit`` lines of the Serve controller's log that contain ``pattern``."""
    if log_dir is None:
        import ray  # noqa: PLC0415

        log_dir = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
    lines = []
    for path in sorted(Path(log_dir).glob("controller_*.log")):
        lines += [line.rstrip() for line in path.read_text(errors="replace").splitlines() if pattern in line]
    return lines[-limit:]


def checker_agrees(report: Any, deployment: str, state: AppState) -> bool:
    """Whether the capacity checker's packing predicted the replicas Ray ran: the replicas it
    placed at peak are the ones running and the rest are the ones pending."""
    result = report.result(deployment)
    expected_running = result.max_placed if result.schedulable else 0
    expected_pending = result.spec.max_replicas - expected_running
    return state.running == expected_running and state.not_ready == expected_pending


def deploy(deployment_cls: Any, app: str, deployment: Mapping[str, Any], *, route_prefix: str | None = None,
           init_kwargs: Mapping[str, Any] | None = None) -> None:
    """Deploy ``deployment_cls`` with the options of ``deployment`` as application ``app``, without
    waiting for it to run (replicas that cannot be placed would block ``serve.run`` forever).
    ``init_kwargs``: the arguments of its constructor (a ``serve build`` config's ``args``)."""
    from ray import serve  # noqa: PLC0415

    bound = deployment_cls.options(**deployment_options(deployment)).bind(**dict(init_kwargs or {}))
    serve._run(bound, name=app, route_prefix=route_prefix or f"/{app}", _blocking=False)


# -- direct ingress -------------------------------------------------------------------------------

#: Environment for a cluster whose ingress replicas serve HTTP themselves (``LocalCluster(serve_env=...)``,
#: or exported before ``ray start``). ``RAY_SERVE_THROUGHPUT_OPTIMIZED`` turns direct ingress on (with
#: Serve's other throughput settings). With it, a stopping ingress replica stays open for
#: ``RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S`` (30 s by default) so that an external load
#: balancer can take it out of rotation first (ray 2.60 ``serve/_private/replica.py``,
#: ``perform_graceful_shutdown``; ``deploy_utils.py`` raises ``graceful_shutdown_timeout_s`` to match):
#: every ``serve.shutdown``, ``serve.delete`` and downscale waits that long. Nothing stands in front
#: of the replicas here, so 1 s; behind a real balancer keep at least its deregistration delay.
DIRECT_INGRESS_ENV = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1"}


def urls_from_target_groups(groups: Iterable[Any], app: str, host: str | None = None) -> list[str]:
    """The HTTP base URLs (``http://ip:port/route_prefix``) of ``app`` in Serve's target groups
    (``ray.serve.schema.TargetGroup``: route prefix, protocol and ``ip``/``port`` targets); ``host``
    in place of each target's ip where given."""
    urls = []
    for group in groups:
        if group.app_name == app and str(getattr(group.protocol, "value", group.protocol)).upper() == "HTTP":
            prefix = "" if group.route_prefix == "/" else group.route_prefix.rstrip("/")
            urls += [f"http://{host or target.ip}:{target.port}{prefix}" for target in group.targets]
    return urls


def ingress_urls(app: str) -> list[str]:
    """Where ``app`` takes HTTP requests: with direct ingress (``RAY_SERVE_ENABLE_DIRECT_INGRESS=1``, part
    of ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``; ray 2.60 ``serve/_private/constants.py``) each ingress
    replica's own port (``RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT``, 30000, and up), else the proxies'.
    Read from the controller's target groups (``ServeController.get_target_groups``,
    ``serve/_private/controller.py``), what HAProxy is configured from. A target's ip is the node's
    address, but a replica binds Serve's HTTP host (``http_options.host``: 127.0.0.1 here), so on this
    machine the URLs use that host (127.0.0.1 where Serve listens on every interface)."""
    import ray  # noqa: PLC0415
    from ray.serve.context import _get_global_client  # noqa: PLC0415

    from scripts.profiles import bind_host  # noqa: PLC0415

    host = bind_host()
    controller = _get_global_client()._controller
    return urls_from_target_groups(ray.get(controller.get_target_groups.remote(app)), app,
                                   "127.0.0.1" if host in ("0.0.0.0", "::") else host)


def all_distinct(items: Iterable[Mapping[str, Any]], key: str) -> bool:
    """Whether every item has its own non-empty ``key`` (each replica its own Triton PID, port ...)."""
    values = [item.get(key) for item in items]
    return all(values) and len(set(values)) == len(values)
