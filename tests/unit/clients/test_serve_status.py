"""scripts.clients.serve_status: Serve's status read and polled (no Ray cluster: statuses, clocks and
sleeps are faked)."""
import enum
import types
from types import SimpleNamespace as NS

import pytest

from scripts.clients import serve_status as ss


def dep_status(status="UPDATING", replicas=None, message=""):
    return NS(status=NS(value=status), replica_states=replicas or {}, message=message)


def serve_status(app="a", app_status="DEPLOYING", deployments=None):
    return NS(applications={app: NS(status=NS(value=app_status), deployments=deployments or {})})


State = enum.Enum("State", {"STARTING": "STARTING", "RUNNING": "RUNNING"})

MSG = ("Deployment 'Ok' in application 'a' has 1 replicas that have taken more than 3s to be scheduled. "
       "This may be due to waiting for the cluster to auto-scale or for a runtime environment to be installed. "
       'Resources required for each replica: {"CPU": 1, "GPU": 3}, total resources available: {"CPU": 8, "GPU": 2}. '
       "Use `ray status` for more details.")


def test_app_state_pending_and_running():
    pending = ss.app_state(serve_status(deployments={"Ok": dep_status(replicas={State.STARTING: 1}, message=MSG)}), "a")
    assert (pending.app_status, pending.deployment_status, pending.running, pending.not_ready) == ("DEPLOYING", "UPDATING", 0, 1)
    assert pending.scheduling_message and ss.pending_with_message(0)(pending) and not ss.all_running(1)(pending)
    assert "replicas: STARTING 1" in pending.format() and "message: Deployment 'Ok'" in pending.format()
    running = ss.app_state(serve_status(app_status="RUNNING", deployments={"Ok": dep_status("HEALTHY", {"RUNNING": 2})}), "a")
    assert ss.all_running(2)(running) and not ss.all_running(1)(running) and "message" not in running.format()
    assert ss.app_state(NS(applications={}), "a").app_status == "NOT_STARTED"
    with pytest.raises(ValueError, match="2 deployments"):
        ss.app_state(serve_status(deployments={"x": dep_status(), "y": dep_status()}), "a")


def test_wait_for_app_polls_and_times_out():
    states = iter([serve_status(), serve_status(deployments={"Ok": dep_status("HEALTHY", {"RUNNING": 1})}, app_status="RUNNING")])
    now = [0.0]

    def sleep(s):
        now[0] += s

    state, waited = ss.wait_for_app("a", ss.all_running(1), 10, status_fn=lambda: next(states),
                                    clock=lambda: now[0], sleep=sleep)
    assert state.running == 1 and waited == 0.5
    with pytest.raises(TimeoutError, match="application a: DEPLOYING"):
        ss.wait_for_app("a", ss.all_running(1), 2, status_fn=serve_status, clock=lambda: now[0], sleep=sleep)


def test_sorted_json_objects():
    assert ss.sorted_json_objects('x {"GPU": 2.0, "CPU": 8.0}. {bad} y') == 'x {"CPU": 8.0, "GPU": 2.0}. {bad} y'


def test_scaled_to_waits_for_stopping_replicas_to_go():
    state = lambda replicas, dep="HEALTHY": ss.AppState("a", "RUNNING", "Ok", dep, replicas)
    assert ss.scaled_to(1)(state({"RUNNING": 1}))
    assert not ss.scaled_to(1)(state({"RUNNING": 1, "STOPPING": 1}))
    assert not ss.scaled_to(1)(state({"RUNNING": 1}, dep="UPSCALING"))
    assert not ss.scaled_to(1)(state({"RUNNING": 2}))


def status(deployment_status: str, **replicas: int):
    dep = types.SimpleNamespace(status=deployment_status, replica_states=replicas, message="")
    app = types.SimpleNamespace(status="RUNNING", deployments={"TritonLLM": dep})
    return types.SimpleNamespace(applications={"llm": app})


def scripted(states):
    """A status function and a clock: each call to the status function is one second later."""
    now = {"t": 0.0, "i": 0}

    def status_fn():
        now["i"] = min(now["i"] + 1, len(states))
        now["t"] += 1.0
        return states[now["i"] - 1]

    return status_fn, (lambda: now["t"]), (lambda _s: None)


def test_watch_replacement_times_detection_and_recovery():
    status_fn, clock, sleep = scripted([status("HEALTHY", RUNNING=1), status("HEALTHY", RUNNING=1),
                                        status("UNHEALTHY", RUNNING=0, STARTING=1), status("UPDATING", STARTING=1),
                                        status("HEALTHY", RUNNING=1)])
    seen = ss.watch_replacement("llm", 1, since=0.0, status_fn=status_fn, clock=clock, sleep=sleep)
    assert (seen.detected_s, seen.recovered_s) == (3.0, 5.0)
    assert seen.states == ["HEALTHY (RUNNING 1)", "UNHEALTHY (STARTING 1)", "UPDATING (STARTING 1)",
                           "HEALTHY (RUNNING 1)"]
    assert "noticed after 3.0 s" in seen.format()


def test_watch_replacement_times_out_with_the_states_seen():
    status_fn, clock, sleep = scripted([status("UNHEALTHY", RUNNING=0)])
    with pytest.raises(TimeoutError, match="UNHEALTHY"):
        ss.watch_replacement("llm", 1, since=0.0, timeout_s=5, status_fn=status_fn, clock=clock, sleep=sleep)
