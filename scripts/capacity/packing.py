"""Packing replicas onto nodes the way the scheduler would have to.

A replica is one actor on one node, so it needs its whole demand on a single node. Replicas are
packed first-fit-decreasing (largest demand first, ties in config order) across nodes in the order
given, all deployments together: first the ``min_replicas`` of every deployment (what must run for
the deploy to finish), then the rest up to ``max_replicas`` (the autoscaling peak);
``max_replicas_per_node`` is honoured. GPUs are individual instances, as in Ray: a fractional
request (``num_gpus: 0.4``) must fit inside one GPU's remaining share, and a request of 1 or more
takes whole, unused GPUs, so five 0.4-GPU replicas do not fit on two GPUs (only four do). Amounts
are compared in Ray's fixed point (1/10000 of a unit), so ``0.1 * 10`` is exactly 1. Placement
groups are modelled on one node (exact for ``STRICT_PACK``, conservative for the other strategies).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from scripts.capacity.cluster import Cluster, Node
from scripts.capacity.spec import DeploymentSpec
from scripts.capacity.units import RAY_RESOURCE_SCALE, to_units


@dataclass(frozen=True)
class Replica:
    """One replica's demand in Ray's fixed point."""

    index: int                     # the deployment's index
    gpus: tuple[int, ...]          # GPU requests in fixed point
    other: tuple[tuple[str, int], ...]  # CPU, memory, custom in fixed point / bytes

    @property
    def size(self) -> tuple:
        custom = sum(u for k, u in self.other if k not in ("CPU", "memory"))
        other = dict(self.other)
        return (sum(self.gpus), max(self.gpus, default=0), custom, other.get("CPU", 0), other.get("memory", 0))


def replica_of(index: int, spec: DeploymentSpec) -> Replica:
    gpus = tuple(sorted((to_units("GPU", g) for g in spec.gpu_requests), reverse=True))
    other = tuple((k, to_units(k, v)) for k, v in spec.demand.items() if k != "GPU")
    return Replica(index, gpus, other)


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


class NodeState:
    """What is still free on one node (and on each of its GPUs) while packing."""

    def __init__(self, node: Node):
        self.node = node
        self.free = {k: to_units(k, v) for k, v in node.all_resources.items() if k != "GPU"}
        self.gpus = [RAY_RESOURCE_SCALE] * node.gpu
        self.replicas: Counter = Counter()

    def lacks(self, replica: Replica, per_node_cap: int | None = None) -> list[str]:
        """Resources this node cannot give ``replica`` right now (empty: it fits)."""
        missing = [k for k, need in replica.other
                   if not (k == "memory" and self.node.memory is None) and self.free.get(k, 0) < need]
        if replica.gpus and _assign_gpus(self.gpus, replica.gpus) is None:
            missing.insert(0, "GPU")
        if per_node_cap is not None and self.replicas[replica.index] >= per_node_cap:
            missing.append("max_replicas_per_node")
        return missing

    def place(self, replica: Replica) -> None:
        for k, need in replica.other:
            if k in self.free:
                self.free[k] -= need
        if replica.gpus:
            self.gpus = _assign_gpus(self.gpus, replica.gpus)
        self.replicas[replica.index] += 1


def pack(specs: Sequence[DeploymentSpec], cluster: Cluster, skip: set[int]
          ) -> tuple[list[int], list[int], list[NodeState], list[NodeState]]:
    """First-fit-decreasing: min replicas of all, then up to max of all.

    Returns placed-at-start and placed-at-peak counts per deployment, and the node states after
    each phase.
    """
    states = [NodeState(n) for n in cluster.nodes]
    placed = [0] * len(specs)

    def run(counts: list[int]) -> None:
        items = [replica_of(i, s) for i, s in enumerate(specs) if i not in skip for _ in range(counts[i])]
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


def _copy_states(states: list[NodeState]) -> list[NodeState]:
    out = []
    for st in states:
        c = NodeState(st.node)
        c.free, c.gpus, c.replicas = dict(st.free), list(st.gpus), Counter(st.replicas)
        out.append(c)
    return out
