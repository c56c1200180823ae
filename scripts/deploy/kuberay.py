"""What KubeRay accepts and does, at the pinned version, as checks on a ``RayService`` object.

The facts come from ray-project/kuberay at tag ``v1.7.0`` (``KUBERAY_VERSION``); each check names the
file it encodes. The CRD is structural: the API server prunes fields it does not know without an
error, so a misspelt key (``serveConfigv2``) disappears silently. :func:`crd_findings` catches that,
wrong types (``rayStartParams`` values must be strings) and what the operator's validation rejects.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

KUBERAY_VERSION = "1.7.0"
RAY_VERSION = "2.60.0"
API_VERSION = "ray.io/v1"  # ray.io_rayservices.yaml: v1 is the storage version (v1alpha1 is served too)
KIND = "RayService"
CRD = f"ray-operator/config/crd/bases/ray.io_rayservices.yaml@v{KUBERAY_VERSION}"

# Property names of the CRD's openAPIV3Schema (CRD above): anything else is pruned on apply.
SPEC_KEYS = frozenset({
    "deploymentUnhealthySecondThreshold", "excludeHeadPodFromServeSvc", "managedBy", "rayClusterConfig",
    "rayClusterDeletionDelaySeconds", "serveConfigV2", "serveService", "serviceUnhealthySecondThreshold",
    "suspend", "upgradeStrategy"})
CLUSTER_KEYS = frozenset({
    "authOptions", "autoscalerOptions", "enableInTreeAutoscaling", "gcsFaultToleranceOptions", "headGroupSpec",
    "headServiceAnnotations", "historyServerOptions", "managedBy", "networkPolicy", "rayVersion", "suspend",
    "tlsOptions", "upgradeStrategy", "workerGroupSpecs"})
HEAD_KEYS = frozenset({"enableIngress", "headService", "ingressOptions", "labels", "rayStartParams", "resources",
                       "serviceType", "template"})
WORKER_KEYS = frozenset({"groupName", "idleTimeoutSeconds", "labels", "maxReplicas", "minReplicas", "numOfHosts",
                         "priority", "rayStartParams", "replicas", "resources", "scaleStrategy", "suspend", "template"})
DEPRECATED_SPEC_KEYS = ("deploymentUnhealthySecondThreshold", "serviceUnhealthySecondThreshold")
WORKER_REQUIRED = ("groupName", "maxReplicas", "minReplicas", "template")  # CRD: workerGroupSpecs.items.required
WORKER_INT32 = ("idleTimeoutSeconds", "maxReplicas", "minReplicas", "numOfHosts", "priority", "replicas")
# ray-operator/apis/ray/v1/rayservice_types.go@v1.7.0 (RayServiceUpgradeType); the CRD leaves it a plain string
# and ray-operator/controllers/ray/utils/validation.go@v1.7.0 (ValidateRayServiceSpec) rejects the rest.
UPGRADE_TYPES = ("NewCluster", "NewClusterWithIncrementalUpgrade", "None")
# ray-operator/controllers/ray/utils/constant.go@v1.7.0: MaxRayServiceNameLength = 53 - 6; the name must
# be a DNS-1035 label (validation.go, ValidateRayServiceMetadata).
MAX_NAME_LENGTH = 47
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Operator facts used by the manifests (same tag):
SERVE_PORT_NAME = "serve"       # common/service.go: the serve Service takes the head container's ports named
                                # "serve" or "serve-*"; without one (and no spec.serveService) it is not created
METRICS_PORT = 8080             # utils/constant.go DefaultMetricsPort; common/pod.go sets metrics-export-port to it
DASHBOARD_AGENT_PORT = 52365    # utils/constant.go DefaultDashboardAgentListenPort (Ray's default too)
SERVE_SVC_SUFFIX = "-serve-svc"  # utils/util.go GenerateServeServiceName: <rayservice>-serve-svc


def _is_int32(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31


def _string_map(value: Any, where: str) -> list[str]:
    # CRD: rayStartParams, labels and resources are objects with additionalProperties {type: string}
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [f"{where} must be a map of string to string, got {type(value).__name__}"]
    return [f"{where}.{k} must be a string (the CRD's additionalProperties are strings), got {v!r}"
            for k, v in value.items() if not isinstance(v, str)]


def _unknown(obj: Mapping, allowed: frozenset, where: str) -> list[str]:
    return [f"{where}.{k} is not a field of the CRD ({CRD}): the API server would drop it"
            for k in sorted(set(obj) - allowed)]


def _group_findings(group: Any, where: str, allowed: frozenset) -> list[str]:
    if not isinstance(group, Mapping):
        return [f"{where} must be an object"]
    out = _unknown(group, allowed, where)
    template = group.get("template")
    if not isinstance(template, Mapping):
        out.append(f"{where}.template is required (a pod template)")
    else:
        containers = (template.get("spec") or {}).get("containers") or []
        if not containers:  # validation.go, ValidateRayClusterSpec: at least one container per group
            out.append(f"{where}.template.spec.containers is empty: the Ray container comes first")
    params = group.get("rayStartParams") or {}
    out += _string_map(group.get("rayStartParams"), f"{where}.rayStartParams")
    out += _string_map(group.get("labels"), f"{where}.labels")
    out += _string_map(group.get("resources"), f"{where}.resources")
    if isinstance(params, Mapping):
        if "labels" in params:  # validation.go, validateRayGroupLabels
            out.append(f"{where}.rayStartParams.labels is rejected: use {where}.labels")
        if group.get("resources") and any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")):
            out.append(f"{where}: resources set both in rayStartParams and resources (validateRayGroupResources)")
    return out


def crd_findings(rayservice: Any) -> list[str]:
    """What KubeRay ``v1.7.0`` would drop or reject in ``rayservice`` (a parsed manifest); empty if none."""
    if not isinstance(rayservice, Mapping):
        return ["a RayService must be a mapping"]
    out = []
    if rayservice.get("apiVersion") != API_VERSION or rayservice.get("kind") != KIND:
        out.append(f"apiVersion/kind must be {API_VERSION}/{KIND}, got "
                   f"{rayservice.get('apiVersion')}/{rayservice.get('kind')}")
    name = (rayservice.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not _DNS1035.match(name) or len(name) > MAX_NAME_LENGTH:
        out.append(f"metadata.name {name!r} must be a DNS-1035 label of at most {MAX_NAME_LENGTH} characters")
    spec = rayservice.get("spec")
    if not isinstance(spec, Mapping):
        return out + ["spec is missing"]
    out += _unknown(spec, SPEC_KEYS, "spec")
    config = spec.get("serveConfigV2")
    if not isinstance(config, str) or not config.strip():
        # optional in the CRD, but without it the RayService deploys no application
        out.append(f"spec.serveConfigV2 must be the Serve config as one YAML string, got {type(config).__name__}")
    upgrade = spec.get("upgradeStrategy") or {}
    if upgrade.get("type") is not None and upgrade.get("type") not in UPGRADE_TYPES:
        out.append(f"spec.upgradeStrategy.type {upgrade.get('type')!r} is not one of {', '.join(UPGRADE_TYPES)}")
    delay = spec.get("rayClusterDeletionDelaySeconds", 0)
    if not (_is_int32(delay) and delay >= 0):  # CRD: int32, minimum 0
        out.append(f"spec.rayClusterDeletionDelaySeconds must be an int32 >= 0, got {delay!r}")
    # ray-operator/apis/ray/v1/rayservice_types.go@v1.7.0: "Deprecated: This field is not used anymore"
    out += [f"spec.{key} is in the CRD but KubeRay no longer acts on it (kuberay#1685)"
            for key in DEPRECATED_SPEC_KEYS if key in spec]
    cluster = spec.get("rayClusterConfig")
    if not isinstance(cluster, Mapping):  # CRD: spec.required = [rayClusterConfig]
        return out + ["spec.rayClusterConfig is required"]
    where = "spec.rayClusterConfig"
    out += _unknown(cluster, CLUSTER_KEYS, where)
    if "rayVersion" in cluster and not isinstance(cluster["rayVersion"], str):
        out.append(f"{where}.rayVersion must be a string, got {cluster['rayVersion']!r}")
    if "headGroupSpec" not in cluster:  # CRD: rayClusterConfig.required = [headGroupSpec]
        out.append(f"{where}.headGroupSpec is required")
    else:
        out += _group_findings(cluster["headGroupSpec"], f"{where}.headGroupSpec", HEAD_KEYS)
        out += _serve_port_findings(cluster["headGroupSpec"], spec)
    workers = cluster.get("workerGroupSpecs") or []
    if not isinstance(workers, list):
        return out + [f"{where}.workerGroupSpecs must be a list"]
    for i, group in enumerate(workers):
        w = f"{where}.workerGroupSpecs[{i}]"
        out += _group_findings(group, w, WORKER_KEYS)
        if not isinstance(group, Mapping):
            continue
        out += [f"{w}.{k} is required" for k in WORKER_REQUIRED if k not in group]
        out += [f"{w}.{k} must be an int32, got {group[k]!r}" for k in WORKER_INT32
                if k in group and not _is_int32(group[k])]
        lo, hi, n = group.get("minReplicas"), group.get("maxReplicas"), group.get("replicas")
        if _is_int32(lo) and _is_int32(hi):  # validation.go, ValidateRayClusterSpec
            if lo < 0 or lo > hi:
                out.append(f"{w}: minReplicas {lo} must be >= 0 and <= maxReplicas {hi}")
            if _is_int32(n) and not lo <= n <= hi:
                out.append(f"{w}: replicas {n} is outside [minReplicas {lo}, maxReplicas {hi}]")
    return out


def _serve_port_findings(head: Any, spec: Mapping) -> list[str]:
    if not isinstance(head, Mapping) or spec.get("serveService"):
        return []
    containers = ((head.get("template") or {}).get("spec") or {}).get("containers") or []
    ports = (containers[0].get("ports") or []) if containers else []
    # common/service.go (getServicePorts): declared ports replace the defaults, which include serve: 8000
    if ports and not any(p.get("name") == SERVE_PORT_NAME or str(p.get("name", "")).startswith("serve-")
                         for p in ports):
        return [f"the head container declares ports but none named {SERVE_PORT_NAME!r}: "
                f"KubeRay would not create the <name>{SERVE_SVC_SUFFIX} Service"]
    return []
