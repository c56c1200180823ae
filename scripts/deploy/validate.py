"""Offline checks of the rendered objects, each by the tool that owns the format.

* ``serveConfigV2``: Ray's own ``ServeDeploySchema`` (what ``serve deploy`` and KubeRay's call to the
  dashboard's ``PUT /api/serve/applications/`` are checked against), and equality with the profile's config.
* Core Kubernetes objects, and each pod template of the ``RayService`` wrapped in a ``v1`` ``Pod``:
  ``kubernetes_validate`` (strict: unknown fields are errors) at :data:`KUBERNETES_VERSIONS`. It has no
  schema for ``RayService`` or ``PodMonitor``: :func:`scripts.deploy.kuberay.crd_findings` and
  :func:`podmonitor_findings` cover those.
* Capacity: :func:`capacity_cluster` turns the worker group's declared resources into the capacity
  checker's cluster, at ``maxReplicas`` Pods.
"""
from __future__ import annotations

from typing import Any, Mapping

import yaml

from scripts.deploy.k8s import cluster_serve_config
from scripts.envcheck import MissingComponent
from scripts.profiles import Profile

# The oldest and newest Kubernetes that KubeRay v1.7.0's CI runs on (ci/kind-config-buildkite-1-29.yml,
# ci/kind-config-buildkite.yml: kindest/node v1.29.0 and v1.35.0).
KUBERNETES_VERSIONS = ("1.29.0", "1.35.0")
GPU_KEY = "nvidia.com/gpu"


def serve_config_findings(rayservice: Mapping[str, Any], profile: Profile) -> list[str]:
    """``serveConfigV2`` parsed by Ray's ``ServeDeploySchema`` and compared with the profile's config."""
    from ray.serve.schema import ServeDeploySchema  # noqa: PLC0415 - Ray is heavy; only this check needs it

    text = rayservice["spec"].get("serveConfigV2")
    try:
        data = yaml.safe_load(text)
        ServeDeploySchema.model_validate(data)
    except Exception as exc:  # yaml.YAMLError, pydantic's ValidationError, TypeError for a non-string
        return [f"serveConfigV2 is not a valid Serve config: {type(exc).__name__}: {exc}"]
    out = []
    if data.get("http_options", {}).get("host") != "0.0.0.0":
        out.append("serveConfigV2: http_options.host must be 0.0.0.0 inside a Pod (probes and the Service use its IP)")
    if data != cluster_serve_config(profile):
        out.append(f"serveConfigV2 differs from env/serve/{profile.name}.yaml's config (python -m scripts.deploy.k8s)")
    return out


def pod_templates(rayservice: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every pod template of the RayService as a ``v1`` ``Pod`` (what KubeRay makes of it, before its additions)."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    groups = {"head": cluster["headGroupSpec"]} | {
        f"worker group {g['groupName']}": g for g in cluster.get("workerGroupSpecs") or []}
    return {where: {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "template", **(g["template"].get("metadata") or {})},
                    "spec": g["template"]["spec"]} for where, g in groups.items()}


def kubernetes_findings(objects: dict[str, Mapping[str, Any]]) -> list[str]:
    """``kubernetes_validate`` (strict) over named core objects, at every version of :data:`KUBERNETES_VERSIONS`."""
    try:
        import kubernetes_validate  # noqa: PLC0415
    except ModuleNotFoundError:
        raise MissingComponent("kubernetes-validate is not installed: pip install kubernetes-validate==1.37.0 "
                               "(a GPU host: rebuild the wheelhouse, env/wheelhouse.py build, which carries it)") from None

    out = []
    for where, obj in objects.items():
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(dict(obj), version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                out.append(f"{where} (Kubernetes {version}) at {path or '<root>'}: {exc.message}")
    return out


def podmonitor_findings(podmonitor: Mapping[str, Any], rayservice: Mapping[str, Any]) -> list[str]:
    """The PodMonitor selects every Ray Pod of the RayService and names a port each of them declares."""
    out = []
    selector = podmonitor["spec"]["selector"]["matchLabels"]
    ports = [e.get("port") for e in podmonitor["spec"]["podMetricsEndpoints"]]
    for where, pod in pod_templates(rayservice).items():
        # KubeRay adds ray.io/is-ray-node: "yes" to every Ray Pod (common/pod.go, labelPod)
        labels = dict(pod["metadata"].get("labels") or {}) | {"ray.io/is-ray-node": "yes"}
        missing = {k: v for k, v in selector.items() if labels.get(k) != v}
        if missing:
            out.append(f"PodMonitor does not select the {where} Pods: they lack {missing}")
        names = {p.get("name") for c in pod["spec"]["containers"][:1] for p in c.get("ports") or []}
        out += [f"PodMonitor scrapes port {p!r}, which the {where} Ray container does not declare"
                for p in ports if p not in names]
    return out


def _resources(group: Mapping[str, Any]) -> tuple[float, int, str | None]:
    """Ray's CPU and GPU of a group's Pod as KubeRay derives them (rayStartParams first, else the
    container's limits: common/pod.go, generateRayStartCommand), and the memory limit."""
    params = group.get("rayStartParams") or {}
    limits = group["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
    cpu = float(params["num-cpus"]) if "num-cpus" in params else float(limits.get("cpu", 0))
    gpu = int(params["num-gpus"]) if "num-gpus" in params else int(limits.get(GPU_KEY, 0))
    return cpu, gpu, limits.get("memory")


def capacity_cluster(rayservice: Mapping[str, Any]) -> dict[str, Any]:
    """The capacity checker's cluster (``scripts.capacity.parse_cluster``) for the RayService at its largest:
    the head and ``maxReplicas`` Pods of every worker group. Memory stays a Kubernetes quantity (``32Gi``),
    which :func:`scripts.capacity.units.parse_memory` reads."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    cpu, gpu, memory = _resources(cluster["headGroupSpec"])
    nodes = [{"name": "head", "CPU": cpu, "GPU": gpu} | ({"memory": memory} if memory else {})]
    for group in cluster.get("workerGroupSpecs") or []:
        cpu, gpu, memory = _resources(group)
        for i in range(group["maxReplicas"]):
            nodes.append({"name": f"{group['groupName']}-{i}", "CPU": cpu, "GPU": gpu}
                         | ({"memory": memory} if memory else {}))
    return {"nodes": nodes}


def gpu_findings(rayservice: Mapping[str, Any]) -> list[str]:
    """Each group's ``num-gpus`` equals its container's GPU request and limit. KubeRay passes
    ``num-gpus`` to ``ray start`` as given: a larger value makes Ray schedule replicas onto GPUs the Pod
    was not granted."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    out = []
    for group in [cluster["headGroupSpec"], *(cluster.get("workerGroupSpecs") or [])]:
        name = group.get("groupName", "head")
        res = group["template"]["spec"]["containers"][0].get("resources", {})
        req, lim = res.get("requests", {}).get(GPU_KEY, "0"), res.get("limits", {}).get(GPU_KEY, "0")
        declared = (group.get("rayStartParams") or {}).get("num-gpus", lim)
        if not (req == lim == declared):
            out.append(f"{name}: num-gpus {declared!r}, {GPU_KEY} request {req!r} and limit {lim!r} must be equal")
    return out
