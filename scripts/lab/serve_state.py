"""Reproduce Ray Serve GPU-resource conflicts and read what Ray and Serve say about them.

Used by ``notebooks/06_troubleshoot_gpu_resources.ipynb``. A deployment is described once, as the
dict a ``serve build`` config holds (``name``, ``num_replicas`` or ``autoscaling_config``,
``ray_actor_options``, ``placement_group_bundles``, ...). The same dict feeds the capacity checker
(:mod:`scripts.capacity`, before deploying) and :func:`deployment_options` (``.options(**)`` of
the real deployment), so what the checker judged is exactly what Ray schedules.

After deploying, :func:`wait_for_app` polls ``serve.status()`` until a condition holds (all
replicas running, or some replicas still pending with Serve's "taken more than ...s to be
scheduled" message) and returns an :class:`AppState` whose :meth:`AppState.format` prints only
stable facts. :func:`pending_demands` reads the autoscaler's view of what cannot be placed (the
"Demands" of ``ray status``).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping


#: Keys of a deployment dict that map onto ``Deployment.options``.
DEPLOYMENT_KEYS = ("name", "num_replicas", "autoscaling_config", "ray_actor_options", "max_replicas_per_node",
                   "placement_group_bundles", "placement_group_strategy")
#: Serve's replica states that hold a replica which is not serving yet.
NOT_READY_STATES = ("STARTING", "UPDATING", "RECOVERING", "PENDING_MIGRATION")
_SCHEDULING_MESSAGE = re.compile(r"to be scheduled")
_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def sorted_json_objects(text: str) -> str:
    """``text`` with each flat JSON object in it rewritten with sorted keys (Serve prints the
    available resources in whatever order Ray returned them)."""
    def canonical(match: re.Match) -> str:
        try:
            return json.dumps(json.loads(match.group(0)), sort_keys=True)
        except ValueError:
            return match.group(0)
    return _JSON_OBJECT.sub(canonical, text)


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


@dataclass(frozen=True)
class AppState:
    """One application with one deployment, as ``serve.status()`` reports it."""

    app: str
    app_status: str
    deployment: str
    deployment_status: str
    replicas: Mapping[str, int] = field(default_factory=dict)
    message: str = ""

    @property
    def running(self) -> int:
        return self.replicas.get("RUNNING", 0)

    @property
    def not_ready(self) -> int:
        return sum(self.replicas.get(s, 0) for s in NOT_READY_STATES)

    @property
    def scheduling_message(self) -> bool:
        """Serve said some replicas wait for resources ("taken more than Ns to be scheduled")."""
        return bool(_SCHEDULING_MESSAGE.search(self.message))

    def format(self) -> str:
        """Stable facts: statuses, replica counts per state, Serve's message."""
        reps = ", ".join(f"{state} {n}" for state, n in sorted(self.replicas.items())) or "none"
        lines = [f"application {self.app}: {self.app_status}",
                 f"deployment {self.deployment}: {self.deployment_status} (replicas: {reps})"]
        if self.message:
            lines.append("message: " + sorted_json_objects(self.message))
        return "\n".join(lines)


def app_state(status: Any, app: str, deployment: str | None = None) -> AppState:
    """An :class:`AppState` from a ``serve.status()`` result (``ServeStatus``)."""
    apps = getattr(status, "applications", {}) or {}
    if app not in apps:
        return AppState(app, "NOT_STARTED", deployment or "", "NOT_STARTED")
    app_status = apps[app]
    deployments = app_status.deployments or {}
    if deployment is None:
        if not deployments:  # the controller has not created it yet
            return AppState(app, _name(app_status.status), "", "NOT_STARTED")
        if len(deployments) != 1:
            raise ConflictSetupError(f"application {app!r} has {len(deployments)} deployments: name one")
        deployment = next(iter(deployments))
    dep = deployments.get(deployment)
    if dep is None:
        return AppState(app, _name(app_status.status), deployment, "NOT_STARTED")
    replicas = {_name(k): int(v) for k, v in (dep.replica_states or {}).items() if v}
    return AppState(app, _name(app_status.status), deployment, _name(dep.status), replicas,
                    " ".join((dep.message or "").split()))


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))


def all_running(expected: int) -> Callable[[AppState], bool]:
    """Condition: the application is RUNNING with ``expected`` replicas running."""
    return lambda s: s.app_status == "RUNNING" and s.running == expected and s.not_ready == 0


def scaled_to(replicas: int) -> Callable[[AppState], bool]:
    """Condition: back to ``replicas`` running, none stopping, the deployment HEALTHY (after a
    downscale Serve keeps the stopped replica as STOPPING for a moment)."""
    return lambda s: all_running(replicas)(s) and not s.replicas.get("STOPPING") and s.deployment_status == "HEALTHY"


def pending_with_message(running: int = 0) -> Callable[[AppState], bool]:
    """Condition: ``running`` replicas run, others wait, and Serve has said why, about all of them
    (its message counts the replicas that waited longer than the threshold; while replicas still
    start up it may count more, so wait for it to agree)."""
    return lambda s: (s.running == running and s.not_ready > 0 and s.scheduling_message
                      and f"has {s.not_ready} replicas" in s.message)


def wait_for_app(app: str, condition: Callable[[AppState], bool], timeout_s: float, *, poll_s: float = 0.5,
                 status_fn: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[AppState, float]:
    """Poll ``serve.status()`` until ``condition(state)`` holds; (last state, seconds waited).

    Raises :class:`TimeoutError` with the last state when ``timeout_s`` passes first.
    """
    if status_fn is None:
        from ray import serve  # noqa: PLC0415 - heavy; unit tests pass status_fn

        status_fn = serve.status
    start = clock()
    while True:
        state = app_state(status_fn(), app)
        if condition(state):
            return state, clock() - start
        if clock() - start > timeout_s:
            raise TimeoutError(f"after {timeout_s:g} s the condition did not hold:\n{state.format()}")
        sleep(poll_s)


def show_pending(app: str, timeout_s: float, running: int = 0) -> tuple[AppState, float]:
    """Wait until ``running`` replicas run and Serve says why the others wait; print the state."""
    state, waited = wait_for_app(app, pending_with_message(running), timeout_s)
    print(state.format())
    return state, waited


def deploy_failed(state: AppState) -> bool:
    """Condition: Serve gave up starting the application (a replica's constructor kept failing)."""
    return state.app_status == "DEPLOY_FAILED"


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
