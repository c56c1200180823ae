"""deploy/k8s: the RayService, PVC, loader Pod and PodMonitor of every profile, checked offline by the
tools that own each format (Ray's Serve schema, Kubernetes' schemas, KubeRay's CRD facts, the capacity
checker), and the committed files kept equal to the rendering."""
from __future__ import annotations

import copy
import sys

import pytest
import yaml

from scripts.capacity import check_capacity
from scripts.deploy import k8s
from scripts.deploy.kuberay import crd_findings
from scripts.deploy.validate import (capacity_cluster, gpu_findings, kubernetes_findings, pod_templates,
                                     podmonitor_findings, serve_config_findings)
from scripts.envcheck import MissingComponent
from scripts.profiles import available_profiles, load_profile

PROFILES = available_profiles()


def committed(name: str, rel: str) -> dict:
    return yaml.safe_load((k8s.DEPLOY_DIR / name / rel).read_text())


def worker(rs: dict) -> dict:
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return group


def head_container(rs: dict) -> dict:
    return rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]


def serve_config(rs: dict) -> dict:
    return yaml.safe_load(rs["spec"]["serveConfigV2"])


def test_committed_files_equal_the_rendering(capsys):
    assert k8s.main(["--check"]) == 0, capsys.readouterr().out


def test_check_notices_a_stale_file_and_main_rewrites_it(tmp_path, capsys):
    assert k8s.main(["--out", str(tmp_path)]) == 0
    assert k8s.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / PROFILES[0] / "rayservice.yaml").write_text("# edited\n")
    assert k8s.main(["--check", "--out", str(tmp_path)]) == 1
    assert "rayservice.yaml" in capsys.readouterr().out


def test_image_option_reaches_every_pod(tmp_path):
    assert k8s.main(["--image", "example.org/llm:v1", "--out", str(tmp_path)]) == 0
    rs = yaml.safe_load((tmp_path / PROFILES[0] / "rayservice.yaml").read_text())
    images = {c["image"] for pod in pod_templates(rs).values() for c in pod["spec"]["containers"]}
    assert images == {"example.org/llm:v1"}


@pytest.mark.parametrize("name", PROFILES)
def test_every_file_carries_the_generated_header(name):
    for rel in k8s.render(load_profile(name)):
        assert (k8s.DEPLOY_DIR / name / rel).read_text().startswith(k8s.HEADER)


@pytest.mark.parametrize("name", PROFILES)
def test_serve_config_passes_rays_schema_and_is_the_profiles(name):
    assert serve_config_findings(committed(name, "rayservice.yaml"), load_profile(name)) == []


@pytest.mark.parametrize("name", PROFILES)
def test_serve_config_is_env_serve_yaml_but_for_the_host(name):
    from scripts.serve.config import config_path  # noqa: PLC0415

    ours, local = serve_config(committed(name, "rayservice.yaml")), yaml.safe_load(config_path(name).read_text())
    assert ours.pop("http_options") != local.pop("http_options")
    assert ours == local


def test_serve_config_findings_catch_a_bad_config_and_a_drift():
    profile = load_profile(PROFILES[0])
    rs = k8s.rayservice(profile)
    data = serve_config(rs)
    data["applications"][0]["deployments"][0]["autoscaling_config"]["max_replicas"] += 1
    rs["spec"]["serveConfigV2"] = yaml.safe_dump(data)
    assert any("differs" in f for f in serve_config_findings(rs, profile))
    data["applications"][0]["deployments"][0]["max_ongoing_requests"] = "many"
    rs["spec"]["serveConfigV2"] = yaml.safe_dump(data)
    assert any("not a valid Serve config" in f for f in serve_config_findings(rs, profile))
    data = serve_config(k8s.rayservice(profile))
    data["http_options"]["host"] = "127.0.0.1"
    rs["spec"]["serveConfigV2"] = yaml.safe_dump(data)
    assert any("0.0.0.0" in f for f in serve_config_findings(rs, profile))


@pytest.mark.parametrize("name", PROFILES)
def test_core_objects_and_pod_templates_pass_kubernetes_schemas(name):
    objects = {"pvc": committed(name, "pvc.yaml"), "loader": committed(name, "load/loader-pod.yaml")}
    assert kubernetes_findings(objects | pod_templates(committed(name, "rayservice.yaml"))) == []


def test_kubernetes_findings_catch_a_misspelt_field_and_a_wrong_type():
    pods = pod_templates(k8s.rayservice(load_profile(PROFILES[0])))
    pod = copy.deepcopy(pods["head"])
    pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/"
    assert any("pth" in f for f in kubernetes_findings({"head": pod}))
    pod = copy.deepcopy(pods["head"])
    pod["spec"]["containers"][0]["ports"][0]["containerPort"] = "6379"
    assert kubernetes_findings({"head": pod})


@pytest.mark.parametrize("name", PROFILES)
def test_rayservice_meets_kuberays_crd(name):
    assert crd_findings(committed(name, "rayservice.yaml")) == []


@pytest.mark.parametrize("breakage", [
    lambda rs: worker(rs)["rayStartParams"].update({"num-gpus": 1}),
    lambda rs: rs["spec"].pop("serveConfigV2"),
    lambda rs: rs["spec"].update({"serveConfigv2": rs["spec"].pop("serveConfigV2")}),
    lambda rs: worker(rs).pop("minReplicas"),
    lambda rs: worker(rs).update({"maxReplicas": "2"}),
    lambda rs: worker(rs).update({"minReplicas": worker(rs)["maxReplicas"] + 1}),
    lambda rs: rs["spec"].update({"upgradeStrategy": {"type": "Rolling"}}),
    lambda rs: rs["spec"].pop("rayClusterConfig"),
    lambda rs: rs["metadata"].update({"name": "LLM_service"}),
    lambda rs: rs["spec"].update({"serviceUnhealthySecondThreshold": 300}),
    lambda rs: head_container(rs).update(ports=[p for p in head_container(rs)["ports"] if p["name"] != "serve"]),
], ids=["int-in-rayStartParams", "no-serveConfigV2", "misspelt-serveConfigV2", "no-minReplicas",
        "string-maxReplicas", "min-above-max", "unknown-upgrade-type", "no-rayClusterConfig", "bad-name",
        "deprecated-threshold",
        "no-serve-port"])
def test_crd_findings_catch_a_broken_copy(breakage):
    rs = k8s.rayservice(load_profile(PROFILES[0]))
    assert crd_findings(rs) == []
    breakage(rs)
    assert crd_findings(rs)


@pytest.mark.parametrize("name", PROFILES)
def test_worker_group_follows_the_profile(name):
    profile, rs = load_profile(name), committed(name, "rayservice.yaml")
    group, head = worker(rs), rs["spec"]["rayClusterConfig"]["headGroupSpec"]
    autoscaling = serve_config(rs)["applications"][0]["deployments"][0]["autoscaling_config"]
    assert (group["minReplicas"], group["maxReplicas"]) == (autoscaling["min_replicas"], autoscaling["max_replicas"])
    assert group["rayStartParams"]["num-gpus"] == str(k8s.gpus_per_worker(profile))
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert gpu_findings(rs) == []


def test_gpu_findings_catch_num_gpus_above_the_pods_gpus():
    name = next(n for n in PROFILES if k8s.gpus_per_worker(load_profile(n)))
    rs = k8s.rayservice(load_profile(name))
    worker(rs)["rayStartParams"]["num-gpus"] = str(k8s.gpus_per_worker(load_profile(name)) + 1)
    assert gpu_findings(rs)


@pytest.mark.parametrize("name", PROFILES)
def test_worker_group_holds_the_serve_config_at_max_replicas(name):
    rs = committed(name, "rayservice.yaml")
    report = check_capacity(serve_config(rs), capacity_cluster(rs))
    assert report.ok, report.findings


@pytest.mark.parametrize("name", [n for n in PROFILES if k8s.gpus_per_worker(load_profile(n))])
def test_capacity_check_fails_when_the_workers_gpus_are_cut(name):
    rs = k8s.rayservice(load_profile(name))
    worker(rs)["rayStartParams"]["num-gpus"] = str(k8s.gpus_per_worker(load_profile(name)) - 1)
    report = check_capacity(serve_config(rs), capacity_cluster(rs))
    assert not report.ok and any("GPU" in f.message for f in report.findings), report.findings


@pytest.mark.parametrize("name", PROFILES)
def test_capacity_check_fails_with_one_worker_fewer(name):
    rs = k8s.rayservice(load_profile(name))
    worker(rs)["maxReplicas"] -= 1
    report = check_capacity(serve_config(rs), capacity_cluster(rs))
    assert {f.kind for f in report.findings} & {"max_replicas", "min_replicas", "unschedulable_replica"}


@pytest.mark.parametrize("name", PROFILES)
def test_podmonitor_scrapes_every_ray_pod(name):
    assert podmonitor_findings(committed(name, "podmonitor.yaml"), committed(name, "rayservice.yaml")) == []


def test_podmonitor_findings_catch_a_wrong_port_and_selector():
    profile = load_profile(PROFILES[0])
    monitor, rs = k8s.podmonitor(profile), k8s.rayservice(profile)
    monitor["spec"]["podMetricsEndpoints"][0]["port"] = "prometheus"
    monitor["spec"]["selector"]["matchLabels"][k8s.POD_LABEL] = "other"
    findings = podmonitor_findings(monitor, rs)
    assert any("port" in f for f in findings) and any("select" in f for f in findings)


@pytest.mark.parametrize("name", PROFILES)
def test_pods_mount_the_claim_where_the_profile_resolves_the_build_dir(name, monkeypatch):
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", k8s.BUILD_MOUNT)
    profile, rs = load_profile(name), committed(name, "rayservice.yaml")
    claim = committed(name, "pvc.yaml")["metadata"]["name"]
    for pod in pod_templates(rs).values():
        (volume,) = pod["spec"]["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim
        paths = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["TUTORIAL_BUILD_DIR"] in paths
        for key in ("engine_dir", "model_dir"):
            assert any(str(profile.path(key)).startswith(p + "/") for p in paths), key


def test_kubernetes_findings_without_the_validator_names_the_install_step(monkeypatch):
    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)  # as on a host without the wheel
    with pytest.raises(MissingComponent, match=r"pip install kubernetes-validate==1\.37\.0"):
        kubernetes_findings({"pod": {"apiVersion": "v1", "kind": "Pod"}})
