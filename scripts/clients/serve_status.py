"""What ``serve.status()`` says about an application, polled until a condition holds.

:func:`app_state` reads one application (with one deployment) out of a ``serve.status()`` result
as an :class:`AppState`, whose :meth:`AppState.format` prints only stable facts. :func:`poll_app`
reads it again every ``poll_s`` until a time limit: :func:`wait_for_app` waits with it until a
condition holds (:func:`all_running`, :func:`scaled_to`, :func:`pending_with_message`,
:func:`deploy_failed`), :func:`watch_replacement` times how long Serve takes to notice a failed
replica and replace it. Unit tests pass ``status_fn``, ``clock`` and ``sleep``; by default they are
``serve.status``, ``time.monotonic`` and ``time.sleep``.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

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
            raise ValueError(f"application {app!r} has {len(deployments)} deployments: name one")
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


def deploy_failed(state: AppState) -> bool:
    """Condition: Serve gave up starting the application (a replica's constructor kept failing)."""
    return state.app_status == "DEPLOY_FAILED"


def poll_app(app: str, timeout_s: float, *, since: float | None = None, poll_s: float = 0.5,
             status_fn: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> Iterator[tuple[AppState, float]]:
    """``(state, seconds since since)`` of ``app`` every ``poll_s``, ``since`` a ``clock()`` time
    (default: now), until ``timeout_s`` seconds have passed since it; the caller stops reading once
    it has seen what it waits for."""
    if status_fn is None:
        from ray import serve  # noqa: PLC0415 - heavy; unit tests pass status_fn

        status_fn = serve.status
    start = clock() if since is None else since
    while True:
        yield app_state(status_fn(), app), clock() - start
        if clock() - start > timeout_s:
            return
        sleep(poll_s)


def wait_for_app(app: str, condition: Callable[[AppState], bool], timeout_s: float, *, poll_s: float = 0.5,
                 status_fn: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[AppState, float]:
    """Poll ``serve.status()`` until ``condition(state)`` holds; (last state, seconds waited).

    Raises :class:`TimeoutError` with the last state when ``timeout_s`` passes first.
    """
    for state, waited in poll_app(app, timeout_s, poll_s=poll_s, status_fn=status_fn, clock=clock, sleep=sleep):
        if condition(state):
            return state, waited
    raise TimeoutError(f"after {timeout_s:g} s the condition did not hold:\n{state.format()}")


@dataclass
class Replacement:
    detected_s: float  # from the failure until Serve counted the replica out
    recovered_s: float  # from the failure until the deployment was whole and HEALTHY again
    states: list[str]  # each distinct state seen, in order

    def format(self) -> str:
        return (f"Serve noticed after {self.detected_s:.1f} s and was whole again after {self.recovered_s:.1f} s; "
                f"states seen: {' -> '.join(self.states)}")


def watch_replacement(app: str, replicas: int, since: float, timeout_s: float = 300, poll_s: float = 0.25,
                      status_fn: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep) -> Replacement:
    """Poll until Serve has noticed a failure caused at ``since`` (``clock()`` time) and runs
    ``replicas`` HEALTHY replicas again; :class:`TimeoutError` with the states seen otherwise."""
    states: list[str] = []
    detected = None
    for state, elapsed in poll_app(app, timeout_s, since=since, poll_s=poll_s, status_fn=status_fn, clock=clock,
                                   sleep=sleep):
        seen = f"{state.deployment_status} ({', '.join(f'{k} {v}' for k, v in sorted(state.replicas.items()))})"
        if not states or states[-1] != seen:
            states.append(seen)
        whole = state.deployment_status == "HEALTHY" and state.running == replicas and state.not_ready == 0
        if detected is None and not whole:
            detected = elapsed
        elif detected is not None and whole:
            return Replacement(detected, elapsed, states)
    raise TimeoutError(f"no replacement within {timeout_s:g} s; states seen: {' -> '.join(states)}")
