"""Capacity checker: catch Ray Serve / Triton GPU-resource conflicts before deploying.

Ray declares resources statically per node (``CPU``, ``GPU``, ``memory`` and custom keys such
as ``accelerator_type:H100``). A Serve replica is one actor on one node, so it needs its whole
``ray_actor_options`` on a single node. A deployment that asks for more than the cluster has
does not fail loudly: its replicas stay PENDING ("Resources requested ... are greater than ...",
"infeasible"), and the Triton server inside them never loads. This module finds those
conflicts from the config files alone.

Two checks:

* :func:`check_capacity` packs every deployment's replicas onto the cluster's nodes, the way the
  scheduler would have to, and reports what cannot be placed, which resource is short by how
  much, and a concrete fix.
* :func:`triton_instance_memory` estimates what ``instance_group { count: N kind: KIND_GPU }``
  costs in GPU memory (each instance holds its own weights, KV cache and activations) and
  :func:`max_safe_instance_count` says how many instances fit.

The packing model
-----------------
* Per-replica demand comes from ``ray_actor_options``: ``num_cpus`` (default **1**, Ray Serve's
  default for replicas), ``num_gpus`` (default 0), ``memory`` (bytes, default 0),
  ``resources`` (custom keys) and ``accelerator_type: X``, which Ray turns into a demand of
  0.001 of the resource ``accelerator_type:X``. With ``placement_group_bundles`` the replica
  needs the sum of its bundles, modelled on one node (exact for ``STRICT_PACK``, conservative for
  ``PACK``/``SPREAD``; ``STRICT_SPREAD`` is noted as not modelled).
* Replica counts: ``num_replicas: N`` (default 1) means min = max = N.
  ``autoscaling_config`` gives ``min_replicas`` (default 1) and ``max_replicas`` (default 1).
  ``num_replicas: "auto"`` means autoscaling with Ray Serve's defaults **min 1, max 100**,
  overridden by any ``autoscaling_config`` fields given with it.
* Replicas are packed first-fit-decreasing (largest demand first, ties in config order) across
  nodes in the order given, all deployments together: first the ``min_replicas`` of every
  deployment (what must run for the deploy to finish), then the rest up to ``max_replicas`` (the
  autoscaling peak). ``max_replicas_per_node`` is honoured.
* GPUs are individual instances, as in Ray: a fractional request (``num_gpus: 0.4``) must fit
  inside one GPU's remaining share, and a request of 1 or more takes whole, unused GPUs. So
  five 0.4-GPU replicas do not fit on two GPUs (only four do), even though 5 x 0.4 = 2.
* Amounts are compared in Ray's fixed point (1/10000 of a unit), so ``0.1 * 10`` is exactly 1.
* Serve's own controller and HTTP proxy actors request 0 CPUs, so they are ignored here; other
  actors or tasks already running on a live cluster are not subtracted (``cluster_from_ray``
  reports total resources, not what is free right now).

Command line::

    python -m scripts.capacity --serve-config serve.yaml --cluster cluster.yaml
    python -m scripts.capacity --serve-config serve.yaml --live
    python -m scripts.capacity --engine-config build/engine/trtllm --model-config config.json \\
        --instance-count 4 --gpu-memory 80GiB

Exit status: 0 when everything fits, 1 when something cannot fit, 2 for malformed input
(a one-line ``error: ...`` on stderr).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

# Ray compares resource amounts in fixed point with four decimal places.
RAY_RESOURCE_SCALE = 10_000
#: Ray Serve's defaults for ``num_replicas: "auto"``.
AUTO_MIN_REPLICAS = 1
AUTO_MAX_REPLICAS = 100
#: Demand Ray adds for ``accelerator_type: X`` in ray_actor_options.
ACCELERATOR_TYPE_DEMAND = 0.001
#: Fraction of GPU memory an estimate may use; the rest is left for the CUDA context, NCCL,
#: allocator fragmentation and whatever else shares the GPU.
USABLE_GPU_MEMORY_FRACTION = 0.9
#: Activation allowance per instance: this fraction of (weights + KV cache) ...
ACTIVATION_FRACTION = 0.10
#: ... plus this fixed runtime overhead (cuBLAS/attention workspaces, runtime buffers).
RUNTIME_OVERHEAD_BYTES = 512 * 2**20

DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "fp32": 4, "float": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
    "int4": 0.5, "fp4": 0.5, "nvfp4": 0.5,
}

_ACTOR_OPTIONS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type")
# Allowed by Ray Serve 2.60 but not about resource amounts (label_selector gets a note).
_IGNORED_ACTOR_OPTIONS = ("runtime_env", "label_selector", "fallback_strategy")
_NODE_KEYS = ("name", "CPU", "GPU", "memory", "resources", "accelerator_type")
_MEMORY_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([A-Za-z]*)\s*$")


class CapacityConfigError(ValueError):
    """A Serve config, cluster description or engine config is malformed; the message says
    which field, where, and what it must be."""


# -- small validation helpers -----------------------------------------------------------------

def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, where: str, *, whole: bool = False, minimum: float = 0) -> float:
    """``value`` as a finite number >= ``minimum`` (a whole number when ``whole``)."""
    kind = "a whole number" if whole else "a number"
    if not _is_number(value) or value < minimum or (whole and value != int(value)):
        raise CapacityConfigError(f"{where} must be {kind} >= {minimum:g}, got {value!r}")
    return int(value) if whole else value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CapacityConfigError(f"{where} must be a mapping (key: value), got {_typename(value)}")
    return value


def _sequence(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise CapacityConfigError(f"{where} must be a list, got {_typename(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CapacityConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _typename(value: Any) -> str:
    return "nothing (null)" if value is None else f"{type(value).__name__} {value!r}"


def _gpu_amount(value: Any, where: str) -> float:
    """A GPU request: fractional up to 1, whole numbers above (Ray's rule for GPUs)."""
    amount = _number(value, where)
    if amount > 1 and amount != int(amount):
        raise CapacityConfigError(
            f"{where} must be a whole number when greater than 1 (a replica takes whole GPUs, "
            f"or a share of one), got {value!r}")
    return amount


def parse_memory(value: Any, where: str = "memory") -> int:
    """Bytes from a number of bytes or a string such as ``"16GiB"``, ``"512 MiB"``, ``"80GB"``.

    Units (case-insensitive): B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB
    (or Ki, Mi, Gi, Ti; powers of 1024). Raises :class:`CapacityConfigError` otherwise.
    """
    if _is_number(value):
        if value < 0:
            raise CapacityConfigError(f"{where} must be a number of bytes >= 0 or a size like '16GiB', got {value!r}")
        return int(value)
    if isinstance(value, str):
        match = _MEMORY_RE.match(value)
        if match:
            number, exponent, unit = match.groups()
            factor = _MEMORY_UNITS.get(unit.lower())
            if factor is None:
                raise CapacityConfigError(
                    f"{where} has an unknown memory unit {unit!r} in {value!r}: use bytes or one of "
                    "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB")
            amount = float(number) * (10 ** int(exponent) if exponent else 1)
            return int(round(amount * factor))
    raise CapacityConfigError(f"{where} must be a number of bytes >= 0 or a size like '16GiB', got {value!r}")


def _units(key: str, amount: float) -> int:
    """An amount in Ray's fixed point (memory stays in bytes)."""
    return int(round(amount)) if key == "memory" else int(round(amount * RAY_RESOURCE_SCALE))


def _amount(key: str, units: int) -> float:
    return float(units) if key == "memory" else units / RAY_RESOURCE_SCALE


def format_bytes(n: float) -> str:
    """``n`` bytes in GiB (or MiB below 1 GiB)."""
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def _fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.4f}".rstrip("0").rstrip(".")


def _fmt_amount(key: str, amount: float) -> str:
    return format_bytes(amount) if key == "memory" else _fmt_number(amount)


def _fmt_resources(resources: Mapping[str, float]) -> str:
    """``GPU 1, CPU 4, memory 16.0 GiB, custom 1`` (Ray's per-node ``node:<ip>`` keys left out)."""
    order = ["GPU", "CPU", "memory"]
    keys = [k for k in order if k in resources] + sorted(
        k for k in resources if k not in order and not k.startswith("node:"))
    return ", ".join(f"{k} {_fmt_amount(k, resources[k])}" for k in keys) or "nothing"


# -- the Serve side ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DeploymentSpec:
    """One Serve deployment as the checker sees it (amounts per replica, human units)."""

    app: str
    name: str
    where: str                     # location in the config, e.g. "applications[0].deployments[1]"
    min_replicas: int
    max_replicas: int
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    accelerator_type: str | None = None
    autoscaling: bool = False
    max_replicas_per_node: int | None = None
    placement_group_bundles: tuple[Mapping[str, float], ...] | None = None
    placement_group_strategy: str = "PACK"
    notes: tuple[str, ...] = ()

    @property
    def full_name(self) -> str:
        return f"{self.app}/{self.name}" if self.app else self.name

    @property
    def gpu_requests(self) -> tuple[float, ...]:
        """Separate GPU requests of one replica (one per bundle with placement groups)."""
        if self.placement_group_bundles is not None:
            return tuple(b["GPU"] for b in self.placement_group_bundles if b.get("GPU", 0) > 0)
        return (self.num_gpus,) if self.num_gpus > 0 else ()

    @property
    def demand(self) -> dict[str, float]:
        """Everything one replica needs on its node: ``CPU``, ``GPU``, ``memory``, custom keys."""
        if self.placement_group_bundles is not None:
            total: Counter = Counter()
            for bundle in self.placement_group_bundles:
                total.update(bundle)
            return {k: v for k, v in total.items() if v > 0}
        demand: dict[str, float] = {"CPU": self.num_cpus, "GPU": self.num_gpus, "memory": self.memory}
        demand.update(self.resources)
        if self.accelerator_type:
            key = f"accelerator_type:{self.accelerator_type}"
            demand[key] = demand.get(key, 0) + ACCELERATOR_TYPE_DEMAND
        return {k: v for k, v in demand.items() if v > 0}

    @property
    def replicas_field(self) -> str:
        return "autoscaling_config.min_replicas" if self.autoscaling else "num_replicas"


def _parse_resources(value: Any, where: str) -> dict[str, float]:
    resources = {}
    for key, amount in _mapping(value, where).items():
        if not isinstance(key, str) or not key:
            raise CapacityConfigError(f"{where} keys must be resource names (strings), got {key!r}")
        if key in ("CPU", "GPU", "memory"):
            option = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}[key]
            raise CapacityConfigError(f"{where}.{key}: use ray_actor_options.{option} instead of resources.{key}")
        resources[key] = _number(amount, f"{where}.{key}")
    return resources


def _parse_bundles(value: Any, where: str) -> tuple[dict[str, float], ...]:
    bundles = []
    for i, raw in enumerate(_sequence(value, where)):
        here = f"{where}[{i}]"
        bundle: dict[str, float] = {}
        for key, amount in _mapping(raw, here).items():
            if key in ("num_cpus", "num_gpus", "cpu", "gpu"):
                raise CapacityConfigError(f"{here}.{key}: bundles name resources as Ray does: CPU, GPU, memory")
            if key == "memory":
                bundle[key] = parse_memory(amount, f"{here}.memory")
            elif key == "GPU":
                bundle[key] = _gpu_amount(amount, f"{here}.GPU")
            else:
                bundle[str(key)] = _number(amount, f"{here}.{key}")
        bundles.append(bundle)
    if not bundles:
        raise CapacityConfigError(f"{where} must list at least one bundle")
    return tuple(bundles)


def _parse_replicas(raw: Mapping[str, Any], where: str) -> tuple[int, int, bool, list[str]]:
    """(min_replicas, max_replicas, autoscaling, notes) of one deployment."""
    notes: list[str] = []
    num = raw.get("num_replicas", None)
    auto_cfg = raw.get("autoscaling_config")
    if num == "auto":
        low, high = AUTO_MIN_REPLICAS, AUTO_MAX_REPLICAS
        notes.append(f"num_replicas: auto = autoscaling with Ray Serve's defaults "
                     f"(min_replicas {AUTO_MIN_REPLICAS}, max_replicas {AUTO_MAX_REPLICAS}) unless "
                     "autoscaling_config overrides them")
    elif num is not None and auto_cfg is not None:
        raise CapacityConfigError(
            f"{where} sets both num_replicas and autoscaling_config: keep one (or use num_replicas: auto)")
    elif isinstance(num, str):
        raise CapacityConfigError(f"{where}.num_replicas must be a whole number >= 0 or 'auto', got {num!r}")
    elif num is not None:
        n = _number(num, f"{where}.num_replicas", whole=True)
        return n, n, False, notes
    elif auto_cfg is None:
        return 1, 1, False, notes
    else:
        low, high = 1, 1
    if auto_cfg is not None:
        cfg = _mapping(auto_cfg, f"{where}.autoscaling_config")
        if "min_replicas" in cfg:
            low = _number(cfg["min_replicas"], f"{where}.autoscaling_config.min_replicas", whole=True)
        if "max_replicas" in cfg:
            high = _number(cfg["max_replicas"], f"{where}.autoscaling_config.max_replicas", whole=True, minimum=1)
        if low > high:
            raise CapacityConfigError(
                f"{where}.autoscaling_config.min_replicas ({low}) must be <= max_replicas ({high})")
        if cfg.get("initial_replicas") is not None:
            initial = _number(cfg["initial_replicas"], f"{where}.autoscaling_config.initial_replicas", whole=True)
            if not low <= initial <= high:
                raise CapacityConfigError(
                    f"{where}.autoscaling_config.initial_replicas ({initial}) must lie between "
                    f"min_replicas ({low}) and max_replicas ({high})")
    return low, high, True, notes


def _parse_deployment(raw: Any, app: str, where: str) -> DeploymentSpec:
    raw = _mapping(raw, where)
    if "name" not in raw:
        raise CapacityConfigError(f"{where} lacks 'name': every deployment needs its name")
    name = _string(raw["name"], f"{where}.name")
    low, high, autoscaling, notes = _parse_replicas(raw, where)
    opts_where = f"{where}.ray_actor_options"
    opts = _mapping(raw.get("ray_actor_options") or {}, opts_where)
    unknown = sorted(set(opts) - set(_ACTOR_OPTIONS) - set(_IGNORED_ACTOR_OPTIONS))
    if unknown:
        raise CapacityConfigError(
            f"{opts_where} has unknown option(s) {', '.join(map(repr, unknown))}: use "
            f"{', '.join(_ACTOR_OPTIONS)} (or {', '.join(_IGNORED_ACTOR_OPTIONS)}, which do not affect placement)")
    if opts.get("label_selector"):
        notes.append("label_selector is not modelled: check that some node carries those labels")
    accelerator = opts.get("accelerator_type")
    if accelerator is not None:
        accelerator = _string(accelerator, f"{opts_where}.accelerator_type")
    per_node = raw.get("max_replicas_per_node")
    if per_node is not None:
        per_node = _number(per_node, f"{where}.max_replicas_per_node", whole=True, minimum=1)
    bundles = None
    strategy = "PACK"
    if raw.get("placement_group_bundles") is not None:
        bundles = _parse_bundles(raw["placement_group_bundles"], f"{where}.placement_group_bundles")
        strategy = raw.get("placement_group_strategy") or "PACK"
        if strategy not in ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"):
            raise CapacityConfigError(
                f"{where}.placement_group_strategy must be PACK, STRICT_PACK, SPREAD or STRICT_SPREAD, "
                f"got {strategy!r}")
        if strategy != "STRICT_PACK":
            caveat = "; STRICT_SPREAD itself is not modelled" if strategy == "STRICT_SPREAD" else ""
            notes.append(f"placement_group_strategy {strategy}: all bundles of a replica are checked on one "
                         f"node (conservative{caveat})")
    return DeploymentSpec(
        app=app, name=name, where=where, min_replicas=low, max_replicas=high,
        num_cpus=_number(opts.get("num_cpus", 1), f"{opts_where}.num_cpus"),
        num_gpus=_gpu_amount(opts.get("num_gpus", 0), f"{opts_where}.num_gpus"),
        memory=parse_memory(opts.get("memory", 0), f"{opts_where}.memory"),
        resources=_parse_resources(opts.get("resources") or {}, f"{opts_where}.resources"),
        accelerator_type=accelerator, autoscaling=autoscaling, max_replicas_per_node=per_node,
        placement_group_bundles=bundles, placement_group_strategy=strategy, notes=tuple(notes),
    )


def parse_serve_config(config: Any) -> list[DeploymentSpec]:
    """Deployments of a Serve config.

    Accepts the ``serve build`` format (a mapping with ``applications: [{name, deployments: [...]}]``),
    a single application (a mapping with ``deployments``), or a plain list of deployment option
    dicts (``{name, num_replicas | autoscaling_config, ray_actor_options, ...}``).
    """
    if isinstance(config, list):
        specs = [_parse_deployment(d, "", f"deployments[{i}]") for i, d in enumerate(config)]
        return _checked_specs(specs)
    if not isinstance(config, Mapping):
        raise CapacityConfigError(
            f"the Serve config must be a mapping with 'applications' or a list of deployments, got {_typename(config)}")
    if "applications" in config:
        apps = [(f"applications[{i}]", a) for i, a in enumerate(_sequence(config["applications"], "applications"))]
    elif "deployments" in config:
        apps = [("application", config)]
    else:
        raise CapacityConfigError(
            "the Serve config has no 'applications' list: give the `serve build` output "
            "(applications: [{name, import_path, deployments: [...]}]) or a list of deployments")
    specs: list[DeploymentSpec] = []
    for where, app in apps:
        app = _mapping(app, where)
        app_name = _string(app["name"], f"{where}.name") if "name" in app else "default"
        if app.get("deployments") is None:
            raise CapacityConfigError(
                f"{where} ({app_name!r}) lists no deployments: add each deployment with its "
                "num_replicas/autoscaling_config and ray_actor_options, as `serve build` writes them")
        for j, dep in enumerate(_sequence(app["deployments"], f"{where}.deployments")):
            specs.append(_parse_deployment(dep, app_name, f"{where}.deployments[{j}]"))
    return _checked_specs(specs)


def _checked_specs(specs: list[DeploymentSpec]) -> list[DeploymentSpec]:
    if not specs:
        raise CapacityConfigError("the Serve config lists no deployments")
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.full_name in seen:
            raise CapacityConfigError(
                f"{spec.where} repeats the deployment name {spec.full_name!r} of {seen[spec.full_name]}: "
                "names must be unique")
        seen[spec.full_name] = spec.where
    return specs


# -- the cluster side -------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    """One Ray node's declared resources. ``memory`` None means: not given, not checked."""

    name: str
    cpu: float
    gpu: int = 0
    memory: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)

    @property
    def all_resources(self) -> dict[str, float]:
        out: dict[str, float] = {"CPU": self.cpu, "GPU": float(self.gpu)}
        if self.memory is not None:
            out["memory"] = float(self.memory)
        out.update(self.resources)
        return out


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]

    def total(self, key: str) -> float:
        return sum(n.all_resources.get(key, 0) for n in self.nodes)

    def has_resource(self, key: str) -> bool:
        return any(n.all_resources.get(key, 0) > 0 for n in self.nodes)

    def anonymized(self) -> "Cluster":
        """The same resources with node names ``node0``, ``node1``... and memory left out: what a
        notebook prints of a live cluster without machine-specific values."""
        return Cluster(tuple(replace(n, name=f"node{i}", memory=None) for i, n in enumerate(self.nodes)))

    def format(self) -> str:
        keys = ("CPU", "GPU", "memory")
        totals = {k: self.total(k) for k in keys if k != "memory" or all(n.memory is not None for n in self.nodes)}
        lines = [f"Cluster: {len(self.nodes)} node(s), {_fmt_resources(totals)}"]
        for node in self.nodes:
            lines.append(f"  {node.name}: {_fmt_resources(node.all_resources)}")
        return "\n".join(lines)


def parse_cluster(data: Any) -> Cluster:
    """A cluster from ``{nodes: [{name, CPU, GPU, memory, resources: {key: n}, accelerator_type}]}``
    (or the bare list of nodes). ``CPU`` is required; ``GPU`` defaults to 0 and must be whole;
    ``memory`` is bytes or a size string (``"64GiB"``) and, when left out, is not checked;
    ``accelerator_type: H100`` adds the resource ``accelerator_type:H100`` as Ray does on GPU nodes.
    """
    if isinstance(data, Mapping):
        if "nodes" not in data:
            raise CapacityConfigError(
                "the cluster description lacks 'nodes': give nodes: [{name, CPU, GPU, memory, resources}]")
        data = data["nodes"]
    raw_nodes = _sequence(data, "nodes")
    if not raw_nodes:
        raise CapacityConfigError("nodes is empty: describe at least one node")
    nodes = []
    for i, raw in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        raw = _mapping(raw, where)
        unknown = sorted(set(raw) - set(_NODE_KEYS))
        if unknown:
            raise CapacityConfigError(
                f"{where} has unknown key(s) {', '.join(map(repr, unknown))}: use {', '.join(_NODE_KEYS)}")
        if "CPU" not in raw:
            raise CapacityConfigError(f"{where} lacks 'CPU': give the node's CPU count")
        name = _string(raw["name"], f"{where}.name") if "name" in raw else f"node{i}"
        resources = {}
        for key, amount in _mapping(raw.get("resources") or {}, f"{where}.resources").items():
            if key in ("CPU", "GPU", "memory"):
                raise CapacityConfigError(f"{where}.resources.{key}: give {key} as a key of the node itself")
            resources[str(key)] = _number(amount, f"{where}.resources.{key}")
        if raw.get("accelerator_type") is not None:
            accel = _string(raw["accelerator_type"], f"{where}.accelerator_type")
            resources.setdefault(f"accelerator_type:{accel}", 1.0)
        nodes.append(Node(
            name=name,
            cpu=_number(raw["CPU"], f"{where}.CPU"),
            gpu=_number(raw.get("GPU", 0), f"{where}.GPU", whole=True),
            memory=None if raw.get("memory") is None else parse_memory(raw["memory"], f"{where}.memory"),
            resources=resources,
        ))
    return Cluster(tuple(nodes))


def cluster_from_ray(address: str | None = None) -> Cluster:
    """The alive nodes of a running Ray cluster (``ray.nodes()``), with their total resources.

    Uses the current connection when ``ray.init`` was already called (a notebook); otherwise
    connects to ``address`` (default ``"auto"``: the cluster ``ray start`` made on this machine)
    and disconnects again. Starts no cluster of its own.
    """
    try:
        import ray  # noqa: PLC0415 - heavy and optional: only the live check needs it
    except ImportError:
        raise CapacityConfigError(
            "ray is not installed: pip install 'ray[serve]' (or describe the cluster in a file)") from None
    connected_here = False
    if not ray.is_initialized():
        try:
            ray.init(address=address or "auto", logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # ConnectionError, RuntimeError: both mean "no cluster there"
            raise CapacityConfigError(
                f"no running Ray cluster at {address or 'auto'} ({type(exc).__name__}: {exc}): "
                "start one (ray start --head --num-gpus=N) or pass --cluster FILE") from None
        connected_here = True
    try:
        raw_nodes = ray.nodes()
    finally:
        if connected_here:
            ray.shutdown()
    nodes = []
    for i, info in enumerate(n for n in raw_nodes if n.get("Alive", n.get("alive", False))):
        res = dict(info.get("Resources") or {})
        host = info.get("NodeManagerAddress") or info.get("NodeManagerHostname") or f"node{i}"
        name = f"{host} ({str(info['NodeID'])[:8]})" if info.get("NodeID") else str(host)
        gpu = res.pop("GPU", 0)
        nodes.append(Node(
            name=str(name),
            cpu=float(res.pop("CPU", 0)),
            gpu=int(gpu),
            memory=int(res.pop("memory")) if "memory" in res else None,
            resources={k: float(v) for k, v in res.items() if k != "object_store_memory"},
        ))
    if not nodes:
        raise CapacityConfigError("the Ray cluster reports no alive nodes")
    return Cluster(tuple(nodes))


# -- results ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shortage:
    """One resource that blocks the remaining replicas of a deployment."""

    resource: str
    needed: float          # what the unplaced replicas need in total
    free: float            # what is still free in the whole cluster
    per_replica: float     # what one replica needs (on one node / one GPU)
    largest_free: float    # the most any single node (or, for fractions, any GPU) has free

    @property
    def short(self) -> float:
        """How much is missing in total (0 when enough is free but split across nodes/GPUs)."""
        return max(0.0, round(self.needed - self.free, 4))

    @property
    def fragmented(self) -> bool:
        return self.short == 0

    def describe(self) -> str:
        r = self.resource
        if self.fragmented and self.largest_free >= self.per_replica:
            return (f"{r}: {_fmt_amount(r, self.largest_free)} free on one node, but not together with "
                    "the other resources a replica needs")
        if self.fragmented:
            return (f"{r}: {_fmt_amount(r, self.free)} free in total but no node"
                    f"{' GPU' if r == 'GPU' and self.per_replica < 1 else ''} has "
                    f"{_fmt_amount(r, self.per_replica)} free in one piece "
                    f"(largest {_fmt_amount(r, self.largest_free)})")
        return (f"{r}: short by {_fmt_amount(r, self.short)} (needs {_fmt_amount(r, self.needed)}, "
                f"{_fmt_amount(r, self.free)} free)")


@dataclass(frozen=True)
class Finding:
    """A problem with one deployment, and how to fix it."""

    deployment: str
    kind: str              # unschedulable_replica | missing_resource | min_replicas | max_replicas
    message: str
    fix: str
    shortages: tuple[Shortage, ...] = ()

    def format(self) -> str:
        text = f"[{self.kind}] {self.deployment}: {self.message}"
        for s in self.shortages:
            text += f"\n      - {s.describe()}"
        return text + f"\n    fix: {self.fix}"


@dataclass(frozen=True)
class DeploymentResult:
    spec: DeploymentSpec
    min_placed: int        # replicas placed when every deployment starts its min_replicas
    max_placed: int        # replicas placed at the autoscaling peak (all at max_replicas)
    schedulable: bool      # one replica fits on some empty node

    @property
    def min_fits(self) -> bool:
        return self.min_placed >= self.spec.min_replicas

    @property
    def max_fits(self) -> bool:
        return self.max_placed >= self.spec.max_replicas

    @property
    def ok(self) -> bool:
        return self.schedulable and self.min_fits and self.max_fits


@dataclass(frozen=True)
class NodeUsage:
    """What the packing put on one node at the autoscaling peak."""

    name: str
    capacity: Mapping[str, float]
    used: Mapping[str, float]
    replicas: Mapping[str, int]


@dataclass(frozen=True)
class CapacityReport:
    cluster: Cluster
    deployments: tuple[DeploymentResult, ...]
    findings: tuple[Finding, ...]
    nodes: tuple[NodeUsage, ...]

    @property
    def ok(self) -> bool:
        return not self.findings and all(d.ok for d in self.deployments)

    def result(self, name: str) -> DeploymentResult:
        """The result of deployment ``name`` (``"app/name"`` or the bare name when unique)."""
        hits = [d for d in self.deployments if name in (d.spec.full_name, d.spec.name)]
        if len(hits) != 1:
            raise KeyError(f"{name!r} names {len(hits)} deployments")
        return hits[0]

    def findings_for(self, name: str) -> list[Finding]:
        full = self.result(name).spec.full_name
        return [f for f in self.findings if f.deployment == full]

    def format_report(self) -> str:
        lines = [self.cluster.format(), "", "Deployments (per replica; replicas placed at start / at peak):"]
        for d in self.deployments:
            s = d.spec
            status = "OK  " if d.ok else "FAIL"
            scale = (f"min {s.min_replicas}, max {s.max_replicas} (autoscaling)" if s.autoscaling
                     else f"num_replicas {s.min_replicas}")
            lines.append(f"  [{status}] {s.full_name}: {_fmt_resources(s.demand)}; {scale}; "
                         f"placed {d.min_placed}/{s.min_replicas} at start, {d.max_placed}/{s.max_replicas} at peak")
            lines.extend(f"         note: {n}" for n in s.notes)
        lines += ["", "Nodes at peak:"]
        for n in self.nodes:
            keys = [k for k in ("GPU", "CPU", "memory") if k in n.capacity]
            keys += sorted(k for k in n.capacity if k not in keys and n.used.get(k))
            used = ", ".join(f"{k} {_fmt_amount(k, n.used.get(k, 0))}/{_fmt_amount(k, n.capacity[k])}" for k in keys)
            reps = ", ".join(f"{name} x{count}" for name, count in n.replicas.items()) or "no replicas"
            lines.append(f"  {n.name}: {used} | {reps}")
        lines.append("")
        if self.findings:
            lines.append("Findings:")
            for i, f in enumerate(self.findings, 1):
                lines.append(f"  {i}. " + f.format().replace("\n", "\n   "))
            lines += ["", f"Result: FAIL ({len(self.findings)} problem(s): "
                          "replicas that cannot be placed stay PENDING)"]
        else:
            lines.append("Result: OK (every deployment fits at min and max replicas)")
        return "\n".join(lines)


# -- packing ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Replica:
    index: int                     # the deployment's index
    gpus: tuple[int, ...]          # GPU requests in fixed point
    other: tuple[tuple[str, int], ...]  # CPU, memory, custom in fixed point / bytes

    @property
    def size(self) -> tuple:
        custom = sum(u for k, u in self.other if k not in ("CPU", "memory"))
        other = dict(self.other)
        return (sum(self.gpus), max(self.gpus, default=0), custom, other.get("CPU", 0), other.get("memory", 0))


def _replica_of(index: int, spec: DeploymentSpec) -> _Replica:
    gpus = tuple(sorted((_units("GPU", g) for g in spec.gpu_requests), reverse=True))
    other = tuple((k, _units(k, v)) for k, v in spec.demand.items() if k != "GPU")
    return _Replica(index, gpus, other)


def _assign_gpus(free: list[int], requests: Sequence[int]) -> list[int] | None:
    """Free GPU shares after granting ``requests`` (whole GPUs for >= 1, one GPU's share below), or None."""
    free = list(free)
    for req in requests:
        if req >= RAY_RESOURCE_SCALE:
            whole = [i for i, f in enumerate(free) if f == RAY_RESOURCE_SCALE][: req // RAY_RESOURCE_SCALE]
            if len(whole) < req // RAY_RESOURCE_SCALE:
                return None
            for i in whole:
                free[i] = 0
        else:
            slot = next((i for i, f in enumerate(free) if f >= req), None)
            if slot is None:
                return None
            free[slot] -= req
    return free


class _NodeState:
    def __init__(self, node: Node):
        self.node = node
        self.free = {k: _units(k, v) for k, v in node.all_resources.items() if k != "GPU"}
        self.gpus = [RAY_RESOURCE_SCALE] * node.gpu
        self.replicas: Counter = Counter()

    def lacks(self, replica: _Replica, per_node_cap: int | None = None) -> list[str]:
        """Resources this node cannot give ``replica`` right now (empty: it fits)."""
        missing = [k for k, need in replica.other
                   if not (k == "memory" and self.node.memory is None) and self.free.get(k, 0) < need]
        if replica.gpus and _assign_gpus(self.gpus, replica.gpus) is None:
            missing.insert(0, "GPU")
        if per_node_cap is not None and self.replicas[replica.index] >= per_node_cap:
            missing.append("max_replicas_per_node")
        return missing

    def place(self, replica: _Replica) -> None:
        for k, need in replica.other:
            if k in self.free:
                self.free[k] -= need
        if replica.gpus:
            self.gpus = _assign_gpus(self.gpus, replica.gpus)
        self.replicas[replica.index] += 1


def _pack(specs: Sequence[DeploymentSpec], cluster: Cluster, skip: set[int]
          ) -> tuple[list[int], list[int], list[_NodeState], list[_NodeState]]:
    """First-fit-decreasing: min replicas of all, then up to max of all.

    Returns placed-at-start and placed-at-peak counts per deployment, and the node states after
    each phase.
    """
    states = [_NodeState(n) for n in cluster.nodes]
    placed = [0] * len(specs)

    def run(counts: list[int]) -> None:
        items = [_replica_of(i, s) for i, s in enumerate(specs) if i not in skip for _ in range(counts[i])]
        for item in sorted(items, key=lambda r: r.size, reverse=True):  # stable: ties keep config order
            cap = specs[item.index].max_replicas_per_node
            node = next((st for st in states if not st.lacks(item, cap)), None)
            if node is not None:
                node.place(item)
                placed[item.index] += 1

    run([s.min_replicas for s in specs])
    at_start = list(placed)
    after_start = _copy_states(states)
    run([s.max_replicas - placed[i] for i, s in enumerate(specs)])
    return at_start, list(placed), after_start, states


def _copy_states(states: list[_NodeState]) -> list[_NodeState]:
    out = []
    for st in states:
        c = _NodeState(st.node)
        c.free, c.gpus, c.replicas = dict(st.free), list(st.gpus), Counter(st.replicas)
        out.append(c)
    return out


def _shortages(spec: DeploymentSpec, index: int, unplaced: int, states: list[_NodeState]) -> tuple[Shortage, ...]:
    """The resources that stop the next replica of ``spec`` from being placed."""
    replica = _replica_of(index, spec)
    blocking: set[str] = set()
    for st in states:
        blocking.update(st.lacks(replica, spec.max_replicas_per_node))
    out = []
    for key, per in sorted(spec.demand.items(), key=lambda kv: (kv[0] != "GPU", kv[0] != "CPU", kv[0])):
        if key not in blocking:
            continue
        if key == "GPU":
            free = sum(f for st in states for f in st.gpus) / RAY_RESOURCE_SCALE
            if per >= 1:  # whole GPUs: count the unused GPUs of each node
                largest = max((sum(f == RAY_RESOURCE_SCALE for f in st.gpus) for st in states), default=0)
            else:         # a share: what the emptiest single GPU has left
                largest = max((f for st in states for f in st.gpus), default=0) / RAY_RESOURCE_SCALE
        else:
            tracked = [st for st in states if key in st.free]
            if key == "memory" and len(tracked) < len(states):
                continue  # some node's memory is not checked
            free = sum(_amount(key, st.free[key]) for st in tracked)
            largest = max((_amount(key, st.free[key]) for st in tracked), default=0.0)
        needed = _amount(key, _units(key, per) * unplaced)
        out.append(Shortage(key, needed=needed, free=free, per_replica=per, largest_free=largest))
    return tuple(out)


# -- fixes ------------------------------------------------------------------------------------

def _gpu_share_fix(specs: list[DeploymentSpec], cluster: Cluster, index: int, skip: set[int], phase: str) -> str | None:
    """``num_gpus: f`` (f = 1/k) that would let deployment ``index`` fit, if sharing a GPU would help."""
    spec = specs[index]
    if spec.placement_group_bundles is not None or spec.num_gpus <= 0:
        return None
    for k in range(2, 9):
        share = math.floor(100 / k) / 100
        if share >= spec.num_gpus:
            continue
        trial = list(specs)
        trial[index] = replace(spec, num_gpus=share)
        at_start, at_peak, _, _ = _pack(trial, cluster, skip)
        target = spec.min_replicas if phase == "min" else spec.max_replicas
        if (at_start if phase == "min" else at_peak)[index] >= target:
            return (f"use num_gpus: {_fmt_number(share)} so {k} replicas share one GPU "
                    "(they also share its memory: check the Triton memory estimate, python -m scripts.capacity "
                    "--engine-config ... --replicas-per-gpu " + str(k) + ")")
    return None


def _competitors(specs: Sequence[DeploymentSpec], index: int, states: list[_NodeState],
                 keys: Iterable[str]) -> list[str]:
    """Other deployments holding some of ``keys`` on the nodes."""
    keys = set(keys)
    held: Counter = Counter()
    for st in states:
        for j, count in st.replicas.items():
            if j == index:
                continue
            demand = specs[j].demand
            for key in keys:
                held[(j, key)] += demand.get(key, 0) * count
    names = []
    for j in sorted({j for (j, _), v in held.items() if v > 0}):
        parts = ", ".join(f"{k} {_fmt_amount(k, held[(j, k)])}" for k in sorted(keys) if held[(j, k)] > 0)
        names.append(f"{specs[j].full_name} (holds {parts})")
    return names


def _add_capacity_fix(shortages: Sequence[Shortage], cluster: Cluster) -> str:
    parts = []
    for s in shortages:
        if s.resource == "GPU" and cluster.total("GPU") == 0:
            parts.append("start Ray with GPUs (ray start --num-gpus=N, or ray.init(num_gpus=N))")
        elif s.fragmented:
            parts.append(f"add a node with at least {_fmt_amount(s.resource, s.per_replica)} {s.resource} free")
        else:
            amount = math.ceil(s.short) if s.resource not in ("memory",) else s.short
            parts.append(f"add {_fmt_amount(s.resource, amount)} {s.resource} "
                         f"(in pieces of at least {_fmt_amount(s.resource, s.per_replica)} per node)")
    return " and ".join(parts)  # every blocking resource must grow


def _single_replica_finding(spec: DeploymentSpec, cluster: Cluster) -> Finding | None:
    """A finding when one replica fits on no empty node (or needs a resource no node has)."""
    replica = _replica_of(0, spec)
    empty = [_NodeState(n) for n in cluster.nodes]
    lacks = [st.lacks(replica) for st in empty]
    if any(not missing for missing in lacks):
        return None
    demand = spec.demand
    absent = sorted(k for k in demand if k not in ("CPU", "GPU", "memory") and not cluster.has_resource(k))
    if absent:
        fixes = []
        for key in absent:
            if key.startswith("accelerator_type:"):
                have = sorted({k for n in cluster.nodes for k in n.resources if k.startswith("accelerator_type:")})
                fixes.append(
                    "remove accelerator_type (or set it to one the cluster has: "
                    f"{', '.join(have) or 'none declared'}), "
                    f"or add a node with resource {key} (ray start --resources='{{\"{key}\": 1}}')")
            else:
                fixes.append(f"add a node with resource {key} (ray start --resources='{{\"{key}\": "
                             f"{_fmt_number(math.ceil(demand[key]))}}}') or remove it from ray_actor_options.resources")
        return Finding(spec.full_name, "missing_resource",
                       f"one replica needs {', '.join(f'{k} {_fmt_number(demand[k])}' for k in absent)}, "
                       "which no node declares: every replica stays PENDING (infeasible)",
                       "; ".join(fixes))
    # Compare with the best node for each blocking resource.
    blocking = sorted({k for missing in lacks for k in missing}, key=lambda k: (k != "GPU", k))
    details, fixes = [], []
    for key in blocking:
        best = max(n.all_resources.get(key, 0) for n in cluster.nodes)
        need = demand[key]
        if key == "GPU" and cluster.total("GPU") == 0:
            details.append(f"GPU {_fmt_number(need)} but the cluster declares no GPUs")
            fixes.append("start Ray with GPUs (ray start --num-gpus=N, or ray.init(num_gpus=N)), "
                         "or set num_gpus: 0 for a CPU replica")
            continue
        if best >= need:
            continue  # fits some node for this key, only not together with the others
        total = cluster.total(key)
        span = (f" (the cluster has {_fmt_amount(key, total)} in total, but a replica is one actor on one node)"
                if total >= need else "")
        details.append(
            f"{key} {_fmt_amount(key, need)} on one node; the largest node has {_fmt_amount(key, best)}{span}")
        option = {"GPU": "num_gpus", "CPU": "num_cpus", "memory": "memory"}.get(key, f"resources.{key}")
        fixes.append(f"lower {option} to {_fmt_amount(key, best)} "
                     f"or add a node with at least {_fmt_amount(key, need)} {key}")
    if not details:  # every resource fits some node, but no node has all of them
        lacking = "; ".join(f"{st.node.name} lacks {', '.join(missing)}" for st, missing in zip(empty, lacks))
        details.append(f"{_fmt_resources(demand)} together on one node, and no node has all of them ({lacking})")
        fixes.append(f"add a node with at least {_fmt_resources(demand)}, or lower the request to fit one of the nodes")
    return Finding(spec.full_name, "unschedulable_replica",
                   "one replica needs " + "; ".join(details) + ": every replica stays PENDING",
                   "; ".join(fixes))


# -- the check --------------------------------------------------------------------------------

def check_capacity(serve_config: Any, cluster: Any) -> CapacityReport:
    """Check that every deployment of ``serve_config`` fits ``cluster`` at min and at max replicas.

    ``serve_config``: a parsed Serve config (see :func:`parse_serve_config`) or a list of
    :class:`DeploymentSpec`. ``cluster``: a :class:`Cluster` or its description (see
    :func:`parse_cluster`).
    """
    specs = (list(serve_config) if isinstance(serve_config, (list, tuple)) and serve_config
             and all(isinstance(s, DeploymentSpec) for s in serve_config) else parse_serve_config(serve_config))
    if not isinstance(cluster, Cluster):
        cluster = parse_cluster(cluster)

    findings: list[Finding] = []
    skip: set[int] = set()
    for i, spec in enumerate(specs):
        finding = _single_replica_finding(spec, cluster)
        if finding is not None:
            findings.append(finding)
            skip.add(i)

    at_start, at_peak, start_states, peak_states = _pack(specs, cluster, skip)
    for i, spec in enumerate(specs):
        if i in skip:
            continue
        if at_start[i] < spec.min_replicas:
            findings.append(_shortfall_finding(specs, cluster, skip, i, "min", at_start[i], start_states))
        elif at_peak[i] < spec.max_replicas:
            findings.append(_shortfall_finding(specs, cluster, skip, i, "max", at_peak[i], peak_states))

    results = tuple(DeploymentResult(s, at_start[i], at_peak[i], i not in skip) for i, s in enumerate(specs))
    usage = []
    for st in peak_states:
        capacity = st.node.all_resources
        used = {k: capacity[k] - _amount(k, st.free[k]) for k in st.free}
        used["GPU"] = st.node.gpu - sum(st.gpus) / RAY_RESOURCE_SCALE
        reps = {specs[j].full_name: c for j, c in sorted(st.replicas.items())}
        usage.append(NodeUsage(st.node.name, capacity, used, reps))
    return CapacityReport(cluster, results, tuple(findings), tuple(usage))


def _pending(n: int) -> str:
    return f"{n} stays PENDING" if n == 1 else f"{n} stay PENDING"


def _shortfall_finding(specs: list[DeploymentSpec], cluster: Cluster, skip: set[int], i: int,
                       phase: str, placed: int, states: list[_NodeState]) -> Finding:
    spec = specs[i]
    target = spec.min_replicas if phase == "min" else spec.max_replicas
    shortages = _shortages(spec, i, target - placed, states)
    keys = [s.resource for s in shortages]
    rivals = _competitors(specs, i, states, keys)
    if phase == "min":
        field_name = spec.replicas_field
        message = (f"only {placed} of {field_name.split('.')[-1]}={target} replicas fit at start: "
                   f"{_pending(target - placed)} and the deployment never becomes healthy")
    else:
        field_name = "autoscaling_config.max_replicas"
        message = (f"at the autoscaling peak only {placed} of max_replicas={target} replicas fit: "
                   f"{_pending(target - placed)}")
    if rivals:
        message += f"; competes with {', '.join(rivals)}"
    lowest = 1 if phase == "min" else max(spec.min_replicas, 1)
    fixes = [f"lower {field_name} to {placed}"] if placed >= lowest else []
    cap = spec.max_replicas_per_node
    if cap is not None and any("max_replicas_per_node" in st.lacks(_replica_of(i, spec), cap) for st in states):
        fixes.append(f"raise max_replicas_per_node (now {cap})")
    if "GPU" in keys:
        share = _gpu_share_fix(specs, cluster, i, skip, phase)
        if share:
            fixes.append(share)
    if rivals:
        fixes.append("lower the replicas or num_gpus of the deployments it competes with")
    fixes.append(_add_capacity_fix(shortages, cluster) if shortages else "add nodes")
    return Finding(spec.full_name, f"{phase}_replicas", message, ", or ".join(fixes), shortages)


# -- Triton instance memory -------------------------------------------------------------------

def _positive_int(config: Mapping[str, Any], keys: Sequence[str], where: str, default: int | None = None) -> int:
    for key in keys:
        if config.get(key) is not None:
            return _number(config[key], f"{where}.{key}", whole=True, minimum=1)
    if default is not None:
        return default
    raise CapacityConfigError(f"{where} lacks {' or '.join(map(repr, keys))}")


def llama_parameter_count(model_config: Mapping[str, Any]) -> int:
    """Parameters of a Llama-architecture model from its Hugging Face ``config.json`` dict.

    Embeddings + per layer (q, k, v, o projections, gate/up/down MLP, two RMSNorms) + final norm
    + LM head (unless ``tie_word_embeddings``). Biases are counted when ``attention_bias`` /
    ``mlp_bias`` are set.
    """
    cfg = _mapping(model_config, "model config")
    where = "model config"
    vocab = _positive_int(cfg, ["vocab_size"], where)
    hidden = _positive_int(cfg, ["hidden_size"], where)
    inter = _positive_int(cfg, ["intermediate_size"], where)
    layers = _positive_int(cfg, ["num_hidden_layers"], where)
    heads = _positive_int(cfg, ["num_attention_heads"], where)
    kv_heads = _positive_int(cfg, ["num_key_value_heads"], where, default=heads)
    head_dim = _positive_int(cfg, ["head_dim"], where, default=hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if cfg.get("attention_bias"):
        attention += q + 2 * kv + hidden
    mlp = 3 * hidden * inter + (2 * inter + hidden if cfg.get("mlp_bias") else 0)
    per_layer = attention + mlp + 2 * hidden
    lm_head = 0 if cfg.get("tie_word_embeddings", False) else vocab * hidden
    return vocab * hidden + layers * per_layer + hidden + lm_head


def _dtype_bytes(name: Any, where: str) -> float:
    if not isinstance(name, str) or name.lower() not in DTYPE_BYTES:
        raise CapacityConfigError(f"{where} must be one of {', '.join(DTYPE_BYTES)}, got {name!r}")
    return DTYPE_BYTES[name.lower()]


@dataclass(frozen=True)
class TritonMemoryEstimate:
    """GPU memory of ``instance_count`` Triton model instances on one GPU."""

    num_parameters: int
    weight_bytes: int          # per instance, per GPU (divided by tensor/pipeline parallelism)
    kv_cache_bytes: int        # per instance, per GPU
    activation_bytes: int      # per instance: fraction of (weights + KV) + fixed runtime overhead
    per_instance_bytes: int    # the sum (or what the engine reserves, if that is more)
    instance_count: int
    replicas_per_gpu: int      # Serve replicas sharing the GPU, each with its own Triton
    gpu_memory_bytes: int
    usable_fraction: float
    max_safe_count: int
    notes: tuple[str, ...] = ()

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_memory_bytes * self.usable_fraction)

    @property
    def total_bytes(self) -> int:
        return self.per_instance_bytes * self.instance_count * self.replicas_per_gpu

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes

    @property
    def ok(self) -> bool:
        return self.fits

    def format_report(self) -> str:
        sharing = f" x {self.replicas_per_gpu} replicas sharing the GPU" if self.replicas_per_gpu > 1 else ""
        estimate = self.weight_bytes + self.kv_cache_bytes + self.activation_bytes
        lines = [
            f"Triton instance memory ({self.num_parameters / 1e9:.3g} B parameters):",
            f"  per instance: weights {format_bytes(self.weight_bytes)} + KV cache {format_bytes(self.kv_cache_bytes)}"
            f" + activations/runtime {format_bytes(self.activation_bytes)} = {format_bytes(estimate)}"
            + (f" (reserves {format_bytes(self.per_instance_bytes)})" if self.per_instance_bytes > estimate else ""),
            f"  instance_group count {self.instance_count}{sharing}: {format_bytes(self.total_bytes)} of "
            f"{format_bytes(self.usable_bytes)} usable "
            f"({self.usable_fraction:.0%} of {format_bytes(self.gpu_memory_bytes)})",
            f"  largest safe count: {self.max_safe_count}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        if self.fits:
            lines.append("Result: OK (the instances fit in GPU memory)")
        elif self.max_safe_count >= 1:
            lines.append("Result: FAIL (out of GPU memory at load): "
                         f"lower instance_group count to {self.max_safe_count}")
        else:
            lines.append("Result: FAIL (not even one instance fits): lower max_batch_size or max_seq_len, use a "
                         "smaller dtype or quantisation, tensor parallelism, or a GPU with more memory"
                         + (", or fewer replicas per GPU" if self.replicas_per_gpu > 1 else ""))
        return "\n".join(lines)


def triton_instance_memory(engine_config: Mapping[str, Any], instance_count: int, gpu_memory_bytes: int | str,
                           model_config: Mapping[str, Any] | None = None, *, num_parameters: int | None = None,
                           replicas_per_gpu: int = 1, usable_fraction: float = USABLE_GPU_MEMORY_FRACTION,
                           activation_fraction: float = ACTIVATION_FRACTION,
                           runtime_overhead_bytes: int = RUNTIME_OVERHEAD_BYTES) -> TritonMemoryEstimate:
    """Estimate the GPU memory of ``instance_count`` Triton instances of one engine.

    Per instance (each ``instance_group`` instance holds its own copy):

    * weights = parameters x bytes of ``weight_dtype`` (default ``dtype``); parameters are
      ``num_parameters`` (argument or engine config key) or computed by
      :func:`llama_parameter_count` from ``model_config``;
    * KV cache = 2 x layers x kv_heads x head_dim x max_seq_len x max_batch_size x bytes of
      ``kv_cache_dtype`` (default ``dtype``), i.e. every sequence of a full batch at full length;
      ``max_seq_len`` is ``max_seq_len`` or ``max_model_len``, ``max_batch_size`` is
      ``max_batch_size`` or ``max_num_seqs`` (TensorRT-LLM or vLLM names);
    * weights and KV cache are divided by ``tp_size``/``tensor_parallel_size`` x ``pp_size``;
    * activations/runtime = ``activation_fraction`` (10 %) of (weights + KV) +
      ``runtime_overhead_bytes`` (512 MiB);
    * if the engine config has vLLM's ``gpu_memory_utilization``, an instance reserves at least
      that fraction of the GPU, whatever the estimate says. (TensorRT-LLM's
      ``kv_cache_free_gpu_mem_fraction`` takes a share of what is *free*, so later instances get
      smaller KV caches rather than failing; the estimate above is the full-batch need.)

    ``replicas_per_gpu``: Serve replicas sharing one GPU (``num_gpus: 0.5`` gives 2), each
    running its own Triton with ``instance_count`` instances. The total must stay within
    ``usable_fraction`` (90 %) of ``gpu_memory_bytes``; the rest is headroom for the CUDA
    context, NCCL and fragmentation.
    """
    where = "engine config"
    cfg = _mapping(engine_config, where)
    count = _number(instance_count, "instance_count", whole=True, minimum=1)
    sharing = _number(replicas_per_gpu, "replicas_per_gpu", whole=True, minimum=1)
    gpu_bytes = parse_memory(gpu_memory_bytes, "gpu_memory")
    if gpu_bytes <= 0:
        raise CapacityConfigError("gpu_memory must be more than 0 bytes")
    if not _is_number(usable_fraction) or not 0 < usable_fraction <= 1:
        raise CapacityConfigError(f"usable_fraction must be a number in (0, 1], got {usable_fraction!r}")
    _number(activation_fraction, "activation_fraction")
    _number(runtime_overhead_bytes, "runtime_overhead_bytes")
    if "dtype" not in cfg:
        raise CapacityConfigError(f"{where} lacks 'dtype'")
    dtype = _dtype_bytes(cfg["dtype"], f"{where}.dtype")

    def dtype_or_default(key: str) -> float:  # weight_dtype / kv_cache_dtype: "auto" or absent = dtype
        return dtype if cfg.get(key) in (None, "auto") else _dtype_bytes(cfg[key], f"{where}.{key}")

    weight_dtype, kv_dtype = dtype_or_default("weight_dtype"), dtype_or_default("kv_cache_dtype")
    max_seq_len = _positive_int(cfg, ["max_seq_len", "max_model_len"], where)
    max_batch = _positive_int(cfg, ["max_batch_size", "max_num_seqs"], where)
    parallel = (_positive_int(cfg, ["tp_size", "tensor_parallel_size"], where, default=1)
                * _positive_int(cfg, ["pp_size", "pipeline_parallel_size"], where, default=1))

    if model_config is None:
        raise CapacityConfigError(
            "the KV-cache estimate needs the model's config.json (num_hidden_layers, num_key_value_heads, "
            "head_dim): pass model_config (CLI: --model-config FILE)")
    model = _mapping(model_config, "model config")
    if num_parameters is None and cfg.get("num_parameters") is not None:
        num_parameters = cfg["num_parameters"]
    params = (llama_parameter_count(model) if num_parameters is None
              else _number(num_parameters, "num_parameters", whole=True, minimum=1))
    layers = _positive_int(model, ["num_hidden_layers"], "model config")
    heads = _positive_int(model, ["num_attention_heads"], "model config")
    kv_heads = _positive_int(model, ["num_key_value_heads"], "model config", default=heads)
    head_dim = _positive_int(model, ["head_dim"], "model config",
                             default=_positive_int(model, ["hidden_size"], "model config") // heads)

    weights = int(params * weight_dtype / parallel)
    kv = int(2 * layers * kv_heads * head_dim * max_seq_len * max_batch * kv_dtype / parallel)
    activations = int(activation_fraction * (weights + kv) + runtime_overhead_bytes)
    per_instance = weights + kv + activations
    notes = []
    utilization = cfg.get("gpu_memory_utilization")
    if utilization is not None:
        if not _is_number(utilization) or not 0 < utilization <= 1:
            raise CapacityConfigError(f"{where}.gpu_memory_utilization must be a number in (0, 1], got {utilization!r}")
        reserved = int(utilization * gpu_bytes)
        if reserved > per_instance:
            notes.append(f"vLLM reserves gpu_memory_utilization={utilization:g} of the GPU per instance "
                         f"({format_bytes(reserved)}), more than the estimate")
            per_instance = reserved
    if parallel > 1:
        notes.append(f"weights and KV cache split over {parallel} GPUs (tensor x pipeline parallel)")
    usable = int(gpu_bytes * usable_fraction)
    return TritonMemoryEstimate(
        num_parameters=params, weight_bytes=weights, kv_cache_bytes=kv, activation_bytes=activations,
        per_instance_bytes=per_instance, instance_count=count, replicas_per_gpu=sharing,
        gpu_memory_bytes=gpu_bytes, usable_fraction=usable_fraction,
        max_safe_count=usable // (per_instance * sharing), notes=tuple(notes),
    )


def max_safe_instance_count(engine_config: Mapping[str, Any], gpu_memory_bytes: int | str,
                            model_config: Mapping[str, Any] | None = None, **kwargs: Any) -> int:
    """The largest ``instance_group`` count that fits in GPU memory (0: not even one).

    Same arguments as :func:`triton_instance_memory`, without ``instance_count``.
    """
    return triton_instance_memory(engine_config, 1, gpu_memory_bytes, model_config, **kwargs).max_safe_count


# -- files and the command line ---------------------------------------------------------------

def _load_file(path: str | Path, what: str) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CapacityConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CapacityConfigError(f"the {what} {path} is not valid JSON: {exc}") from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise CapacityConfigError(f"the {what} {path} is not valid YAML{at}: {problem}") from None
    if data is None:
        raise CapacityConfigError(f"the {what} {path} is empty")
    return data


def load_serve_config(path: str | Path) -> list[DeploymentSpec]:
    """Deployments of a Serve config file (YAML or JSON)."""
    return parse_serve_config(_load_file(path, "Serve config"))


def load_cluster(path: str | Path) -> Cluster:
    """A cluster description file (YAML or JSON)."""
    return parse_cluster(_load_file(path, "cluster description"))


def _engine_and_model(engine_path: str, model_path: str | None) -> tuple[dict, dict]:
    path = Path(engine_path)
    if path.is_dir():
        path = path / "engine_config.json"
    engine = _mapping(_load_file(path, "engine config"), f"engine config {path}")
    if model_path is None:
        model_dir = engine.get("model_dir")
        candidate = Path(model_dir) / "config.json" if isinstance(model_dir, str) else None
        if candidate is None or not candidate.is_file():
            raise CapacityConfigError("--model-config FILE is required (the model's config.json): the engine "
                                      "config names no model_dir holding one")
        model_path = str(candidate)
    mpath = Path(model_path)
    if mpath.is_dir():
        mpath = mpath / "config.json"
    model = _mapping(_load_file(mpath, "model config"), f"model config {mpath}")
    return dict(engine), dict(model)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.capacity",
        description="Check Ray Serve deployments and Triton instance counts against the cluster before deploying. "
                    "Exit 0: everything fits; 1: something cannot fit; 2: malformed input.")
    parser.add_argument("--serve-config", metavar="FILE",
                        help="Serve config (serve build YAML, or a list of deployments)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", metavar="FILE",
                       help="cluster description: nodes: [{name, CPU, GPU, memory, resources}]")
    where.add_argument("--live", action="store_true", help="read the nodes of the running Ray cluster")
    parser.add_argument("--address", default=None, help="Ray address for --live (default: auto)")
    parser.add_argument("--engine-config", metavar="FILE", help="engine_config.json (or its directory)")
    parser.add_argument("--model-config", metavar="FILE", help="the model's Hugging Face config.json")
    parser.add_argument("--num-parameters", type=int, default=None,
                        help="parameter count (default: from the model config)")
    parser.add_argument("--instance-count", type=int, default=1, help="Triton instance_group count (default 1)")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="memory of one GPU, e.g. 80GiB")
    parser.add_argument("--replicas-per-gpu", type=int, default=1, help="Serve replicas sharing one GPU (default 1)")
    args = parser.parse_args(argv)

    try:
        if not args.serve_config and not args.engine_config:
            raise CapacityConfigError("nothing to check: give --serve-config FILE and/or --engine-config FILE")
        reports = []
        if args.serve_config:
            if not args.cluster and not args.live:
                raise CapacityConfigError("--serve-config needs the cluster: --cluster FILE or --live")
            specs = load_serve_config(args.serve_config)
            cluster = cluster_from_ray(args.address) if args.live else load_cluster(args.cluster)
            reports.append(check_capacity(specs, cluster))
        if args.engine_config:
            if not args.gpu_memory:
                raise CapacityConfigError("--engine-config needs --gpu-memory SIZE (e.g. 80GiB)")
            engine, model = _engine_and_model(args.engine_config, args.model_config)
            reports.append(triton_instance_memory(
                engine, args.instance_count, args.gpu_memory, model,
                num_parameters=args.num_parameters, replicas_per_gpu=args.replicas_per_gpu))
    except CapacityConfigError as exc:
        print("error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 2
    print("\n\n".join(r.format_report() for r in reports))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
