"""Serve config keys Ray 2.60 no longer takes: Ray's own schema on each table entry, the checker, the CLI.

The Ray tests run Ray 2.60's ``ServeDeploySchema`` (what ``serve deploy`` and ``serve run CONFIG``
validate a file with) and the ``DeploymentConfig`` the controller builds from it, so the table in
``scripts/capacity/renamed.py`` fails here if Ray ever takes an old key again.
"""
import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import yaml
from pydantic import ValidationError
from ray.serve._private.config import DeploymentConfig
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import (DeploymentSchema, HTTPOptionsSchema, RayActorOptionsSchema, ServeApplicationSchema,
                              ServeDeploySchema)

from capacity_builders import app, dep, nodes
from scripts.capacity import KEY_CHANGES, check_capacity, check_serve_keys, serve_key_findings, upgrade_serve_keys
from scripts.capacity.cli import main
from scripts.capacity.keycheck import deprecated_key_notes
from scripts.capacity.renamed import (ACTOR, APP, AUTOSCALING, DEPLOYMENT, DEPRECATED_KEYS, HTTP, SINGLE_APP_FORMAT,
                                      TOP, change_for)
from scripts.capacity.spec import parse_serve_config
from scripts.capacity.units import CapacityConfigError

RAY_DIR = Path(ray.__file__).parent
REPO = Path(__file__).resolve().parents[3]
MODELS = {TOP: ServeDeploySchema, HTTP: HTTPOptionsSchema, APP: ServeApplicationSchema, DEPLOYMENT: DeploymentSchema,
          AUTOSCALING: AutoscalingConfig, ACTOR: RayActorOptionsSchema}
#: A value for each old key (the value a guide would write).
VALUES = {"max_concurrent_queries": 7, "target_num_ongoing_requests_per_replica": 4, "object_store_memory": 1000,
          "host": "127.0.0.1", "port": 8123, "location": "HeadOnly", "num_cpus": 1, "import_path": "other.mod:app",
          "route_prefix": "/other", "runtime_env": {"env_vars": {"A": "1"}}, "args": {"profile": "cpu"},
          "deployments": [{"name": "D", "num_replicas": 2}]}


def base_config():
    """A config Ray 2.60 accepts, with one application and one autoscaling deployment."""
    return {"http_options": {"host": "127.0.0.1", "port": 8000},
            "applications": [{"name": "llm", "route_prefix": "/", "import_path": "mod:app", "deployments": [
                {"name": "T", "autoscaling_config": {"min_replicas": 1, "max_replicas": 2},
                 "ray_actor_options": {"num_cpus": 1}}]}]}


def with_old_key(change, *, app_lacks_key=False):
    """``base_config`` with the old key of ``change`` where older guides put it."""
    config = base_config()
    application = config["applications"][0]
    deployment = application["deployments"][0]
    place = {TOP: config, HTTP: config["http_options"], APP: application, DEPLOYMENT: deployment,
             AUTOSCALING: deployment["autoscaling_config"], ACTOR: deployment["ray_actor_options"]}[change.scope]
    if change.scope == HTTP or change.new_scope == HTTP:
        config["http_options"].pop(change.new, None)  # so the old key is the only value
    if app_lacks_key and change.scope == TOP and change.new_scope == APP:
        application.pop(change.new, None)
    place[change.old] = copy.deepcopy(VALUES[change.old])
    return config


def ray_effective(config):
    """What Ray 2.60 keeps of ``config``: the dump ``serve deploy`` sends, and the deployment's DeploymentConfig
    as the controller builds it (ray/serve/_private/application_state.py override_deployment_infos)."""
    sent = ServeDeploySchema.model_validate(config).model_dump(exclude_unset=True)
    deployment = dict(sent["applications"][0]["deployments"][0])
    options = {k: v for k, v in deployment.items() if k not in ("name", "ray_actor_options")}
    return sent, DeploymentConfig(**options)


def ids(change):
    return f"{change.scope}.{change.old}".replace(" ", "_")


# --- the table against Ray 2.60's sources ------------------------------------------------------------------


@pytest.mark.parametrize("change", KEY_CHANGES, ids=ids)
def test_table_cites_ray_2_60_sources_and_fields(change):
    assert ray.__version__ == "2.60.0"
    for part in change.where_defined.split("; "):
        cited, symbol = part.split()[:2]
        text = (RAY_DIR.parent / cited).read_text()
        cls, _, attr = symbol.partition(".")
        assert re.search(rf"^class {cls}\b", text, re.M) and attr in text, part
    # An old key is no field of its Ray model, or a field a validator rejects (host/port in an application).
    assert change.rejected or change.old not in MODELS[change.scope].model_fields, "Ray 2.60 takes it again"
    if change.new is not None:
        assert change.new in MODELS[change.new_scope].model_fields


@pytest.mark.parametrize("change", KEY_CHANGES, ids=ids)
def test_ray_2_60_rejects_or_drops_each_old_key(change):
    config = with_old_key(change)
    if change.rejected:
        with pytest.raises(ValidationError):
            ServeDeploySchema.model_validate(config)
        return
    sent, deployment_config = ray_effective(config)
    application = sent["applications"][0]
    deployment = application["deployments"][0]
    kept = {TOP: sent, HTTP: sent.get("http_options", {}), APP: application, DEPLOYMENT: deployment,
            ACTOR: deployment.get("ray_actor_options", {})}
    if change.scope == AUTOSCALING:
        # Kept in the autoscaling_config dict that `serve deploy` sends, then dropped by AutoscalingConfig.
        assert not hasattr(deployment_config.autoscaling_config, change.old)
        assert deployment_config.autoscaling_config.target_ongoing_requests == 2
    else:
        assert change.old not in kept[change.scope]
    if change.old == "max_concurrent_queries":
        assert deployment_config.max_ongoing_requests == 5


@pytest.mark.parametrize("change", KEY_CHANGES, ids=ids)
def test_upgraded_config_is_taken_by_ray_with_the_value_under_its_new_key(change):
    config = with_old_key(change, app_lacks_key=True)
    upgraded = upgrade_serve_keys(config)
    assert check_serve_keys(upgraded) == []
    assert config == with_old_key(change, app_lacks_key=True)  # the input is left alone
    sent, deployment_config = ray_effective(upgraded)
    if change.new is None:
        return
    value = VALUES[change.old]
    got = {TOP: lambda: sent[change.new], HTTP: lambda: sent["http_options"][change.new],
           APP: lambda: sent["applications"][0][change.new],
           DEPLOYMENT: lambda: getattr(deployment_config, change.new),
           AUTOSCALING: lambda: getattr(deployment_config.autoscaling_config, change.new)}[change.new_scope]()
    assert got == value


def test_ray_error_texts_are_recorded():
    # target_num_ongoing_requests_per_replica: Ray 2.60 gives no error at all.
    config = with_old_key(change_for(AUTOSCALING, "target_num_ongoing_requests_per_replica"))
    sent, deployment_config = ray_effective(config)
    assert sent["applications"][0]["deployments"][0]["autoscaling_config"][
        "target_num_ongoing_requests_per_replica"] == 4            # what `serve config` shows back
    assert deployment_config.autoscaling_config.target_ongoing_requests == 2   # what the autoscaler uses

    with pytest.raises(ValidationError) as host:
        ServeDeploySchema.model_validate(with_old_key(change_for(APP, "host")))
    assert host.value.errors()[0]["msg"] == (
        'Value error, Host "127.0.0.1" is set in the config for application `llm`. '
        "Please remove it and set host in the top level deploy config only.")
    with pytest.raises(ValidationError) as port:
        ServeDeploySchema.model_validate(with_old_key(change_for(APP, "port")))
    assert port.value.errors()[0]["msg"] == (
        "Value error, Port 8123 is set in the config for application `llm`. "
        "Please remove it and set port in the top level deploy config only.")
    with pytest.raises(ValidationError) as single:
        ServeDeploySchema.model_validate({"import_path": "mod:app", "deployments": [{"name": "T"}]})
    assert [(e["type"], e["loc"], e["msg"]) for e in single.value.errors()] == [
        ("missing", ("applications",), "Field required")]


@pytest.mark.parametrize("deprecated", DEPRECATED_KEYS, ids=lambda d: d.old)
def test_deprecated_keys_are_still_taken_by_ray_and_only_noted(deprecated):
    assert deprecated.old in AutoscalingConfig.model_fields  # still a field: not in KEY_CHANGES
    config = base_config()
    config["applications"][0]["deployments"][0]["autoscaling_config"][deprecated.old] = 40.0
    ServeDeploySchema.model_validate(config)
    assert check_serve_keys(config) == []
    assert deprecated.old in deprecated_key_notes(config)["llm/T"][0]
    report = check_capacity(config, nodes(0))
    assert report.ok and any(deprecated.instead in n for n in report.result("T").spec.notes)


def test_deprecated_smoothing_factors_still_steer_the_autoscaler():
    assert AutoscalingConfig(upscale_smoothing_factor=0.5).get_upscaling_factor() == 0.5
    assert AutoscalingConfig(downscale_smoothing_factor=0.25).get_downscaling_factor() == 0.25


# --- the checker -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", KEY_CHANGES, ids=ids)
def test_checker_names_the_old_and_the_new_key(change):
    findings = serve_key_findings(with_old_key(change))
    assert [f.kind for f in findings] == [change.kind]
    text = findings[0].format()
    assert change.old in text and (change.new is None or change.target in text)
    assert ("rejects the whole config" in text) == change.rejected
    report = check_capacity(with_old_key(change), nodes(0))
    assert not report.ok and report.findings[0] == findings[0]
    assert "Ray 2.60 rejects or drops without an error: fix them before serve deploy" in report.format_report()


def test_finding_message_and_fix_for_target_num_ongoing_requests_per_replica():
    config = app(dep("T", 1, autoscale=(1, 2)))
    config["applications"][0]["deployments"][0]["autoscaling_config"]["target_num_ongoing_requests_per_replica"] = 4
    (message,) = check_serve_keys(config)
    assert message == (
        "[renamed_key] llm/T: applications[0].deployments[0].autoscaling_config."
        "target_num_ongoing_requests_per_replica is the old name of target_ongoing_requests (renamed in Ray 2.10, removed in ray-project/ray#46392). "
        "Ray 2.60 does not know it and drops it without an error: the autoscaler aims at the default "
        "target_ongoing_requests 2 instead of 4\n"
        "    fix: rename target_num_ongoing_requests_per_replica to target_ongoing_requests in "
        "applications[0].deployments[0].autoscaling_config")


def test_a_key_finding_names_its_key_as_a_field():
    config = app(dep("T", 1, autoscale=(1, 2)))
    config["applications"][0]["deployments"][0]["max_concurrent_queries"] = 7
    config["applications"][0]["deployments"][0]["autoscaling_config"]["target_num_ongoing_requests_per_replica"] = 4
    assert sorted(f.key for f in serve_key_findings(config)) == [
        "max_concurrent_queries", "target_num_ongoing_requests_per_replica"]


def test_capacity_findings_still_appear_next_to_the_key_findings():
    new = app(dep("T", 1, autoscale=(1, 4)))
    old = copy.deepcopy(new)
    old["applications"][0]["deployments"][0]["max_concurrent_queries"] = 8
    old["applications"][0]["deployments"][0]["autoscaling_config"]["target_num_ongoing_requests_per_replica"] = 4
    new_report, old_report = check_capacity(new, nodes(2)), check_capacity(old, nodes(2))
    assert [f.kind for f in old_report.findings] == ["renamed_key", "renamed_key", "max_replicas"]
    assert old_report.findings[2:] == new_report.findings
    assert old_report.deployments == new_report.deployments
    assert old_report.format_report().splitlines()[-1] == (
        "Result: FAIL (3 problem(s): 2 Serve config key(s) that Ray 2.60 rejects or drops without an error; "
        "replicas that cannot be placed stay PENDING)")


def test_new_key_already_set_means_delete_the_old_one():
    config = base_config()
    deployment = config["applications"][0]["deployments"][0]
    deployment.update(max_ongoing_requests=16, max_concurrent_queries=8)
    (finding,) = serve_key_findings(config)
    assert finding.fix == ("delete max_concurrent_queries in applications[0].deployments[0]: "
                           "max_ongoing_requests is already set (16)")
    assert upgrade_serve_keys(config)["applications"][0]["deployments"][0]["max_ongoing_requests"] == 16


def test_single_application_format_is_reported_and_still_judged():
    config = {"import_path": "mod:app", "host": "127.0.0.1", "port": 8001,
              "deployments": [{"name": "T", "num_replicas": 3, "ray_actor_options": {"num_gpus": 1}}]}
    (finding,) = serve_key_findings(config)
    assert finding.kind == SINGLE_APP_FORMAT.kind and "no applications list" in finding.message
    assert "wrap the application in a list" in finding.fix and "move host and port to http_options" in finding.fix
    report = check_capacity(config, nodes(2))
    assert [f.kind for f in report.findings] == ["moved_key", "min_replicas"]
    ServeDeploySchema.model_validate(upgrade_serve_keys(config))


def test_config_with_current_keys_passes():
    config = base_config()
    deployment = config["applications"][0]["deployments"][0]
    deployment["max_ongoing_requests"] = 8
    deployment["autoscaling_config"].update(target_ongoing_requests=4, upscaling_factor=1.5)
    config["proxy_location"] = "HeadOnly"
    assert serve_key_findings(config) == [] and check_serve_keys(config) == []
    assert check_capacity(config, nodes(0)).ok
    ServeDeploySchema.model_validate(config)


@pytest.mark.parametrize("path", sorted((REPO / "env" / "serve").glob("*.yaml")), ids=lambda p: p.name)
def test_the_tutorial_serve_configs_use_current_keys(path):
    config = yaml.safe_load(path.read_text())
    assert check_serve_keys(config) == [] and deprecated_key_notes(config) == {}
    ServeDeploySchema.model_validate(config)


def test_parse_serve_config_names_a_removed_actor_option():
    config = app(dep("T", 1, object_store_memory=1000))
    with pytest.raises(CapacityConfigError, match="object_store_memory was removed from Ray Serve"):
        parse_serve_config(config)
    assert [f.kind for f in check_capacity(config, nodes(1)).findings] == ["removed_key"]


# --- the command line --------------------------------------------------------------------------------------


@pytest.fixture
def old_yaml(tmp_path):
    config = app(dep("T", 1, autoscale=(1, 2)))
    config["applications"][0]["deployments"][0]["autoscaling_config"]["target_num_ongoing_requests_per_replica"] = 4
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(nodes(2)))
    return path


def test_cli_fails_on_an_old_key(old_yaml, capsys):
    assert main(["--serve-config", str(old_yaml), "--cluster", str(old_yaml.with_name("cluster.yaml"))]) == 1
    out = capsys.readouterr().out
    assert "[renamed_key] llm/T" in out
    assert "rename target_num_ongoing_requests_per_replica to target_ongoing_requests" in out
    assert "[OK  ] llm/T" in out  # the rest of the config is still judged


def test_cli_keys_only_needs_no_cluster(old_yaml, capsys):
    assert main(["--serve-config", str(old_yaml), "--keys-only"]) == 1
    out = capsys.readouterr().out
    assert "rename target_num_ongoing_requests_per_replica to target_ongoing_requests" in out
    assert out.rstrip().endswith("fix them before serve deploy)")
    assert main(["--serve-config", str(REPO / "env" / "serve" / "cpu.yaml"), "--keys-only"]) == 0
    assert "Result: OK (no renamed, moved or removed Serve config keys)" in capsys.readouterr().out


def test_cli_prints_the_old_keys_even_when_the_config_is_malformed(old_yaml, capsys):
    config = yaml.safe_load(old_yaml.read_text())
    config["applications"][0]["deployments"][0]["ray_actor_options"]["num_gpus"] = "one"
    old_yaml.write_text(yaml.safe_dump(config))
    assert main(["--serve-config", str(old_yaml), "--cluster", str(old_yaml.with_name("cluster.yaml"))]) == 2
    captured = capsys.readouterr()
    assert "rename target_num_ongoing_requests_per_replica" in captured.out
    assert captured.err.startswith("error: ") and "num_gpus must be a number" in captured.err


def test_cli_as_a_module_exits_non_zero_with_the_message(old_yaml):
    command = [sys.executable, "-m", "scripts.capacity", "--serve-config", str(old_yaml), "--keys-only"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "target_num_ongoing_requests_per_replica is the old name of target_ongoing_requests" in proc.stdout
