"""The Serve application on Kubernetes: a KubeRay ``RayService`` per profile, rendered from the profiles.

``python -m scripts.deploy.k8s`` writes ``deploy/k8s/<profile>/`` (``pvc.yaml``, ``rayservice.yaml``,
``podmonitor.yaml`` and ``load/loader-pod.yaml``); ``--check`` fails when a committed file differs from
``env/profiles.toml``. ``serveConfigV2`` is :func:`scripts.serve.config.app_config`, the config that
``env/serve/<profile>.yaml`` holds, with one change for the cluster (:func:`cluster_serve_config`).
``--image`` and ``--out`` write copies for another image elsewhere.

Sizing: one Serve replica per worker Pod. A worker declares the replica's ``num_cpus``/``num_gpus`` to
Ray (``rayStartParams``) and asks Kubernetes for those GPUs plus CPU headroom for Triton's own
processes, which Ray does not count. The worker group spans the Serve autoscaling range; KubeRay's
in-tree autoscaler adds a Pod when Serve adds a replica that fits nowhere.
"""
from __future__ import annotations

import math
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from scripts.deploy.kuberay import (API_VERSION, DASHBOARD_AGENT_PORT, KIND, KUBERAY_VERSION, METRICS_PORT,
                                    RAY_VERSION, SERVE_PORT_NAME)
from scripts.generated import sync
from scripts.paths import REPO_ROOT
from scripts.profiles import Profile, available_profiles, load_profile
from scripts.serve.config import app_config

DEPLOY_DIR = REPO_ROOT / "deploy" / "k8s"
HEADER = "# generated from env/profiles.toml by python -m scripts.deploy.k8s; do not edit\n"
# Replace on publishing: python -m scripts.deploy.k8s --image <registry>/<name>:<tag> --out DIR
IMAGE = "registry.example.com/llm-tutorial:{profile}"
APP_DIR = "/workspace/tutorial"            # the Dockerfile's WORKDIR: the repository, installed editable
BUILD_MOUNT = f"{APP_DIR}/build"           # build_dir() there: the filled repository holds absolute paths into it
SERVE_PORT = 8000
CPU_HEADROOM = 2                           # Triton's server and Python stubs, the raylet, the proxy
HEAD = {"cpu": "2", "memory": "8Gi"}
WORKER_MEMORY = {"cpu": "8Gi", "gpu": "32Gi"}
STORAGE = {"cpu": "5Gi", "gpu": "50Gi"}    # the build directory: engine, filled repository, model (gpu)
POD_LABEL = "app.kubernetes.io/instance"


def service_name(profile: Profile) -> str:
    return f"llm-{profile.name}"


def gpus_per_worker(profile: Profile) -> int:
    """Whole GPUs a worker Pod asks for: one replica's ``num_gpus`` (Kubernetes counts GPUs whole)."""
    return math.ceil(profile["num_gpus_per_replica"])


def cluster_serve_config(profile: Profile) -> dict[str, Any]:
    """:func:`app_config` for a Pod: the proxy listens on 0.0.0.0, because the serve Service, the
    readiness probe and Prometheus reach it at the Pod's IP, not on its loopback."""
    config = app_config(profile, http_port=SERVE_PORT)
    config["http_options"]["host"] = "0.0.0.0"
    return config


def _kind(profile: Profile) -> str:
    return "gpu" if gpus_per_worker(profile) else "cpu"


def _mounts(profile: Profile, read_only_model: bool = True) -> tuple[list[dict], list[dict]]:
    """The build directory on the claim at the path the profile resolves it to, and an absolute
    ``model_dir`` (gpu-trtllm's ``/models/...``) from the claim's ``models/`` folder."""
    mounts = [{"name": "build", "mountPath": BUILD_MOUNT, "subPath": "build"}]
    model_dir = PurePosixPath(profile["model_dir"])
    if model_dir.is_absolute():
        mounts.append({"name": "build", "mountPath": str(model_dir.parent), "subPath": "models",
                       "readOnly": read_only_model})
    volumes = [{"name": "build", "persistentVolumeClaim": {"claimName": f"{service_name(profile)}-build"}}]
    return mounts, volumes


def _env() -> list[dict[str, str]]:
    # LC_ALL: Triton's Python stub starts in the C locale (docs: the vLLM/torch locale fix)
    return [{"name": "TUTORIAL_BUILD_DIR", "value": BUILD_MOUNT}, {"name": "LC_ALL", "value": "C.UTF-8"}]


def _http_probe(path: str, port: int | str, initial: int, timeout: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "initialDelaySeconds": initial, "periodSeconds": 5,
            "timeoutSeconds": timeout, "successThreshold": 1, "failureThreshold": failures}


# Probes. KubeRay v1.7.0 injects a liveness and a readiness probe into the Ray container only where the
# template has none (ray-operator/controllers/ray/common/pod.go, initLivenessAndReadinessProbe: "if
# rayContainer.LivenessProbe == nil"); ours replace them. For Ray >= 2.53 its default is an HTTP GET of
# /api/healthz on the dashboard agent (port 52365), which Ray 2.60 answers with the raylet's health and,
# on the head, the GCS's (ray/dashboard/modules/reporter/healthz_agent.py). Its timings
# (utils/constant.go) are kept: liveness 30 s delay, 120 failures x 5 s before a restart. For a
# RayService worker its readiness also asks the node's Serve proxy (/-/healthz on the serve port, one
# failure), so the serve Service only routes to workers whose proxy is up: ours asks the proxy as an
# HTTP probe, which needs no wget or bash in the image. The head's membership in the serve Service is
# set by the RayService controller (a label), not by readiness (pod.go, BuildPod).
def _liveness(head: bool) -> dict[str, Any]:
    return _http_probe("/api/healthz", DASHBOARD_AGENT_PORT, 30, 5 if head else 2, 120)


def _readiness(head: bool) -> dict[str, Any]:
    if head:
        return _http_probe("/api/healthz", DASHBOARD_AGENT_PORT, 10, 5, 10)
    return _http_probe("/-/healthz", SERVE_PORT_NAME, 10, 2, 1)


def _container(profile: Profile, image: str, head: bool) -> dict[str, Any]:
    mounts, _ = _mounts(profile)
    if head:
        resources = {"requests": dict(HEAD), "limits": dict(HEAD)}
        ports = [{"name": "gcs-server", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8265},
                 {"name": "client", "containerPort": 10001}]
    else:
        cpus = str(math.ceil(profile["serve_num_cpus_per_replica"]) + CPU_HEADROOM)
        limits = {"cpu": cpus, "memory": WORKER_MEMORY[_kind(profile)]}
        if gpus_per_worker(profile):
            limits["nvidia.com/gpu"] = str(gpus_per_worker(profile))
        resources = {"requests": dict(limits), "limits": dict(limits)}
        ports = []
    ports += [{"name": SERVE_PORT_NAME, "containerPort": SERVE_PORT},
              {"name": "metrics", "containerPort": METRICS_PORT}]
    # No command: KubeRay writes the `ray start` command into the first container (pod.go, BuildPod).
    return {"name": "ray-head" if head else "ray-worker", "image": image, "imagePullPolicy": "IfNotPresent",
            "env": _env(), "ports": ports, "resources": resources, "volumeMounts": mounts,
            "livenessProbe": _liveness(head), "readinessProbe": _readiness(head)}


def _template(profile: Profile, image: str, head: bool) -> dict[str, Any]:
    _, volumes = _mounts(profile)
    return {"metadata": {"labels": {POD_LABEL: service_name(profile)}},
            "spec": {"containers": [_container(profile, image, head)], "volumes": volumes}}


def rayservice(profile: Profile, image: str | None = None) -> dict[str, Any]:
    """The ``RayService`` (``ray.io/v1``) of a profile."""
    image = image or IMAGE.format(profile=profile.name)
    gpus = gpus_per_worker(profile)
    lo, hi = profile["serve_min_replicas"], profile["serve_max_replicas"]
    serve_yaml = yaml.safe_dump(cluster_serve_config(profile), sort_keys=False)
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": service_name(profile),
                     "labels": {"app.kubernetes.io/name": "llm-tutorial", POD_LABEL: service_name(profile)}},
        "spec": {
            # NewCluster: a change to rayClusterConfig brings up a second RayCluster (the worker group's GPUs
            # twice) and switches the serve Service to it once its applications run; a change to
            # serveConfigV2 alone is applied in place. "None" where the GPUs are not there twice.
            "upgradeStrategy": {"type": "NewCluster"},
            "serveConfigV2": serve_yaml,
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "enableInTreeAutoscaling": hi > lo,
                "headGroupSpec": {
                    # num-cpus/num-gpus 0: no replica lands on the head; dashboard-host: reachable from
                    # the operator (KubeRay defaults it to 0.0.0.0 too: pod.go, setMissingRayStartParams)
                    "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
                    "template": _template(profile, image, head=True),
                },
                "workerGroupSpecs": [{
                    "groupName": f"{_kind(profile)}-workers",
                    "replicas": lo, "minReplicas": lo, "maxReplicas": hi,
                    "rayStartParams": {"num-cpus": str(profile["serve_num_cpus_per_replica"]), "num-gpus": str(gpus)},
                    "template": _template(profile, image, head=False),
                }],
            },
        },
    }


def pvc(profile: Profile) -> dict[str, Any]:
    """The claim holding the build directory. ReadWriteMany: head and workers on several nodes mount it
    (the head builds the application, replicas write Triton's logs under it). No storageClassName: the
    cluster's default class, which must offer ReadWriteMany (NFS, CephFS, EFS, Filestore...)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{service_name(profile)}-build"},
            "spec": {"accessModes": ["ReadWriteMany"],
                     "resources": {"requests": {"storage": STORAGE[_kind(profile)]}}}}


def loader_pod(profile: Profile, image: str | None = None) -> dict[str, Any]:
    """A Pod of the same image with the claim at the same paths, to copy or build the model repository into."""
    mounts, volumes = _mounts(profile, read_only_model=False)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{service_name(profile)}-loader"},
            "spec": {"restartPolicy": "Never", "volumes": volumes,
                     "containers": [{"name": "loader", "image": image or IMAGE.format(profile=profile.name),
                                     "command": ["sleep", "infinity"], "env": _env(), "volumeMounts": mounts}]}}


def podmonitor(profile: Profile) -> dict[str, Any]:
    """Prometheus Operator's ``PodMonitor`` for Ray's metrics agents (head and workers, port ``metrics``).
    Triton's metrics stay inside each replica on loopback; the Serve metrics come through Ray's."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": f"{service_name(profile)}-ray", "labels": {POD_LABEL: service_name(profile)}},
            "spec": {"selector": {"matchLabels": {POD_LABEL: service_name(profile), "ray.io/is-ray-node": "yes"}},
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}]}}


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(obj: dict[str, Any], note: str = "") -> str:
    return HEADER + note + yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def render(profile: Profile, image: str | None = None) -> dict[str, str]:
    """File name (relative to ``deploy/k8s/<profile>/``) -> text."""
    return {
        "pvc.yaml": dump(pvc(profile), "# apply first; fill it with load/loader-pod.yaml (deploy/k8s/README.md)\n"),
        "rayservice.yaml": dump(rayservice(profile, image),
                                f"# KubeRay v{KUBERAY_VERSION}, Ray {RAY_VERSION}; serveConfigV2 = env/serve/"
                                f"{profile.name}.yaml with http_options.host 0.0.0.0\n"),
        "podmonitor.yaml": dump(podmonitor(profile),
                                "# needs the Prometheus Operator's CRDs (monitoring.coreos.com)\n"),
        "load/loader-pod.yaml": dump(loader_pod(profile, image),
                                     "# not applied with the folder: kubectl apply -f this file, copy, delete it\n"),
    }


def main(argv: list[str] | None = None) -> int:
    """Write ``deploy/k8s/<profile>/`` from the profiles (``--check``: fail if they differ)."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--image", help="image of every Pod (default: the committed placeholder)")
    parser.add_argument("--out", type=Path, default=DEPLOY_DIR, help="folder to write into (default deploy/k8s)")
    args = parser.parse_args(argv)
    files = {args.out / name / rel: text for name in available_profiles()
             for rel, text in render(load_profile(name), args.image).items()}
    return sync(files, args.check, "python -m scripts.deploy.k8s")

if __name__ == "__main__":
    raise SystemExit(main())
