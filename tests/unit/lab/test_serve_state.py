"""Unit tests for scripts.lab.serve_state (no Ray cluster: statuses are faked; reading and polling
Serve's status: tests/unit/clients/test_serve_status.py)."""
from types import SimpleNamespace as NS

import pytest

from scripts.clients.serve_status import AppState
from scripts.lab import serve_state as rc
from scripts.capacity import check_capacity, parse_cluster


def test_serve_config_and_options_roundtrip():
    dep = {"name": "Ok", "num_replicas": 2, "ray_actor_options": {"num_gpus": 0.5}}
    cfg = rc.serve_config("a", dep)
    assert cfg["applications"][0]["name"] == "a" and cfg["applications"][0]["route_prefix"] == "/a"
    assert cfg["applications"][0]["deployments"] == [dep]
    opts = rc.deployment_options(dep)
    assert opts == dep and opts["ray_actor_options"] is not dep["ray_actor_options"]
    both = rc.merge_configs(cfg, rc.serve_config("b", dict(dep, name="Other")))
    assert [a["name"] for a in both["applications"]] == ["a", "b"]
    with pytest.raises(rc.ConflictSetupError, match="at least one deployment"):
        rc.serve_config("a")


def test_deployment_options_rejects_unknown_keys():
    with pytest.raises(rc.ConflictSetupError, match="'num_gpus'"):
        rc.deployment_options({"name": "Ok", "num_gpus": 1})
    with pytest.raises(rc.ConflictSetupError, match="lacks 'name'"):
        rc.deployment_options({"num_replicas": 1})
    bundles = {"name": "Tp", "placement_group_bundles": [{"CPU": 1, "GPU": 1}, {"GPU": 1}],
               "placement_group_strategy": "STRICT_PACK", "autoscaling_config": None}
    assert "autoscaling_config" not in rc.deployment_options(bundles)


def test_demands_from_status_merges_and_drops_node_keys():
    by = lambda bundle, n: NS(bundle=bundle, count=n)  # noqa: E731
    status = NS(resource_demands=NS(
        ray_task_actor_demand=[NS(bundles_by_count=[by({"GPU": 1.0, "CPU": 1.0}, 1)]),
                               NS(bundles_by_count=[by({"CPU": 1.0, "GPU": 1.0, "node:127.0.0.1": 0.001}, 2)])],
        placement_group_demand=[NS(bundles_by_count=[by({"GPU": 3.0}, 1)])]))
    demands = rc.demands_from_status(status)
    assert demands == [({"CPU": 1.0, "GPU": 1.0}, 3), ({"GPU": 3.0}, 1)]
    text = rc.format_demands(demands)
    assert text.splitlines() == ["Demands:", " {'CPU': 1.0, 'GPU': 1.0}: 3+ pending tasks/actors",
                                 " {'GPU': 3.0}: 1+ pending tasks/actors"]
    assert "no resource demands" in rc.format_demands([])


def test_controller_log_lines(tmp_path):
    (tmp_path / "controller_1.log").write_text("INFO up\nWARNING x to be scheduled a\nWARNING x to be scheduled b\n")
    assert rc.controller_log_lines(log_dir=tmp_path, limit=1) == ["WARNING x to be scheduled b"]
    assert rc.controller_log_lines("nothing", log_dir=tmp_path) == []


def test_checker_agrees_with_observed_states():
    cluster = parse_cluster({"nodes": [{"name": "head", "CPU": 8, "GPU": 2}]})
    peak = {"name": "Ok", "autoscaling_config": {"min_replicas": 1, "max_replicas": 3, "initial_replicas": 3},
            "ray_actor_options": {"num_gpus": 1}}
    report = check_capacity(rc.serve_config("a", peak), cluster)
    two_of_three = AppState("a", "DEPLOYING", "Ok", "UPDATING", {"RUNNING": 2, "STARTING": 1})
    assert rc.checker_agrees(report, "Ok", two_of_three)
    assert not rc.checker_agrees(report, "Ok", AppState("a", "RUNNING", "Ok", "HEALTHY", {"RUNNING": 3}))
    too_big = check_capacity(rc.serve_config("a", {"name": "Big", "ray_actor_options": {"num_gpus": 3}}), cluster)
    assert rc.checker_agrees(too_big, "Big", AppState("a", "DEPLOYING", "Big", "UPDATING", {"STARTING": 1}))


def test_pending_replica_actors_from_actor_table():
    table = {"1": {"ActorClassName": "ServeReplica:a:Ok", "State": "PENDING_CREATION"},
             "2": {"ActorClassName": "ServeReplica:a:Ok", "State": "ALIVE"},
             "3": {"ActorClassName": "ServeController", "State": "PENDING_CREATION"}}
    assert rc.pending_replica_actors(table) == ["ServeReplica:a:Ok"]


def test_wait_for_demands_returns_the_first_non_empty_answer():
    answers = iter([[], [], [({"GPU": 3.0}, 1)]])
    assert rc.wait_for_demands(5, poll_s=0, demands_fn=lambda: next(answers)) == [({"GPU": 3.0}, 1)]
    assert rc.wait_for_demands(0, poll_s=0, demands_fn=list) == []


def test_urls_from_target_groups_keeps_the_http_targets_of_one_app():
    from ray.serve.schema import RequestProtocol, Target, TargetGroup

    def targets(*ports):
        return [Target(ip="10.0.0.5", port=p, instance_id=f"i{p}", name=f"replica-{p}") for p in ports]

    groups = [TargetGroup(targets=targets(30000, 30001), route_prefix="/", protocol=RequestProtocol.HTTP, app_name="llm"),
              TargetGroup(targets=targets(40000), route_prefix="/", protocol=RequestProtocol.GRPC, app_name="llm"),
              TargetGroup(targets=targets(30002), route_prefix="/engine/", protocol=RequestProtocol.HTTP, app_name="engine"),
              TargetGroup(targets=targets(8000), route_prefix="/other", protocol=RequestProtocol.HTTP, app_name="other")]
    assert rc.urls_from_target_groups(groups, "llm") == ["http://10.0.0.5:30000", "http://10.0.0.5:30001"]
    assert rc.urls_from_target_groups(groups, "engine") == ["http://10.0.0.5:30002/engine"]
    assert rc.urls_from_target_groups(groups, "absent") == []
    assert rc.urls_from_target_groups(groups, "engine", "127.0.0.1") == ["http://127.0.0.1:30002/engine"]
    # a protocol given as a plain string counts too
    assert rc.urls_from_target_groups([NS(app_name="llm", protocol="http", route_prefix="/engine", targets=targets(1))],
                                      "llm") == ["http://10.0.0.5:1/engine"]


def test_direct_ingress_env_turns_it_on_and_shortens_the_drain():
    import os
    import subprocess
    import sys

    code = ("from ray.serve._private import constants as c; "
            "print(c.RAY_SERVE_ENABLE_DIRECT_INGRESS, c.RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE")}
    default = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    tuned = subprocess.run([sys.executable, "-c", code], env=clean | rc.DIRECT_INGRESS_ENV, capture_output=True, text=True,
                           check=True)
    assert default.stdout.split() == ["False", "30.0"]  # Ray's defaults: no direct ingress, a 30 s drain
    assert tuned.stdout.split() == ["True", "1.0"]


def test_all_distinct_needs_every_value_present_and_different():
    assert rc.all_distinct([{"pid": 1}, {"pid": 2}], "pid")
    assert not rc.all_distinct([{"pid": 1}, {"pid": 1}], "pid")
    assert not rc.all_distinct([{"pid": 1}, {}], "pid")
