"""The cluster side: nodes and their declared resources, from a description or a live Ray cluster.

Ray declares resources statically per node (``CPU``, ``GPU``, ``memory`` and custom keys such
as ``accelerator_type:H100``). :func:`parse_cluster` reads a description file's data;
:func:`cluster_from_ray` reads the alive nodes of a running cluster (total resources, not what is
free right now); :meth:`Cluster.anonymized` hides what is specific to one machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from scripts.capacity.units import (CapacityConfigError, fmt_resources, parse_memory, require_list, require_mapping,
                                    require_number, require_string)

_NODE_KEYS = ("name", "CPU", "GPU", "memory", "resources", "accelerator_type")
#: The prefix of the resource Ray adds to nodes whose GPUs it detects (``accelerator_type:H100``).
ACCELERATOR_PREFIX = "accelerator_type:"
#: GPU models Ray names (``ray.util.accelerators``), tried in this order for one the cluster lacks.
KNOWN_ACCELERATORS = ("A100", "H100", "H200", "L4", "T4", "V100", "A10G", "L40S")


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

    def accelerator_types(self) -> list[str]:
        """The ``accelerator_type`` names its nodes declare (``H100`` for ``accelerator_type:H100``), sorted."""
        return sorted({k[len(ACCELERATOR_PREFIX):] for n in self.nodes for k, v in n.resources.items()
                       if k.startswith(ACCELERATOR_PREFIX) and v > 0})

    def anonymized(self) -> "Cluster":
        """The same resources with node names ``node0``, ``node1``... and memory left out: what a
        notebook prints of a live cluster without machine-specific values. Nodes come in a stable order
        (most GPUs first, then most CPUs), not Ray's, which follows random node ids."""
        ordered = sorted(self.nodes, key=lambda n: (-n.gpu, -n.cpu, sorted(n.resources.items())))
        return Cluster(tuple(replace(n, name=f"node{i}", memory=None) for i, n in enumerate(ordered)))

    def format(self) -> str:
        keys = ("CPU", "GPU", "memory")
        totals = {k: self.total(k) for k in keys if k != "memory" or all(n.memory is not None for n in self.nodes)}
        lines = [f"Cluster: {len(self.nodes)} node(s), {fmt_resources(totals)}"]
        for node in self.nodes:
            lines.append(f"  {node.name}: {fmt_resources(node.all_resources)}")
        return "\n".join(lines)


def absent_accelerator_type(cluster: Cluster, wanted: str | None = None) -> str:
    """An ``accelerator_type`` no node of ``cluster`` has: ``wanted`` if given (refused when a node has it),
    else the first of :data:`KNOWN_ACCELERATORS` that none has."""
    present = cluster.accelerator_types()
    if wanted is not None:
        name = require_string(wanted, "accelerator type")
        if name in present:
            raise ValueError(f"accelerator_type {name!r} is present in this cluster (it has {present}): name one it "
                             "lacks, or leave it None to have one derived")
        return name
    for name in KNOWN_ACCELERATORS:
        if name not in present:
            return name
    raise ValueError(f"this cluster has every accelerator type of {KNOWN_ACCELERATORS}: name one it lacks")


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
    raw_nodes = require_list(data, "nodes")
    if not raw_nodes:
        raise CapacityConfigError("nodes is empty: describe at least one node")
    nodes = []
    for i, raw in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        raw = require_mapping(raw, where)
        unknown = sorted(set(raw) - set(_NODE_KEYS))
        if unknown:
            raise CapacityConfigError(
                f"{where} has unknown key(s) {', '.join(map(repr, unknown))}: use {', '.join(_NODE_KEYS)}")
        if "CPU" not in raw:
            raise CapacityConfigError(f"{where} lacks 'CPU': give the node's CPU count")
        name = require_string(raw["name"], f"{where}.name") if "name" in raw else f"node{i}"
        resources = {}
        for key, amount in require_mapping(raw.get("resources") or {}, f"{where}.resources").items():
            if key in ("CPU", "GPU", "memory"):
                raise CapacityConfigError(f"{where}.resources.{key}: give {key} as a key of the node itself")
            resources[str(key)] = require_number(amount, f"{where}.resources.{key}")
        if raw.get("accelerator_type") is not None:
            accel = require_string(raw["accelerator_type"], f"{where}.accelerator_type")
            resources.setdefault(f"accelerator_type:{accel}", 1.0)
        nodes.append(Node(
            name=name,
            cpu=require_number(raw["CPU"], f"{where}.CPU"),
            gpu=require_number(raw.get("GPU", 0), f"{where}.GPU", whole=True),
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
