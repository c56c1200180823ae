"""Findings: what cannot be placed, which resource is short by how much, and a concrete fix.

Two kinds of problem: a replica that fits on no empty node (``unschedulable_replica``, or
``missing_resource`` when it asks for a resource no node declares), and replicas that do not all
fit together at start (``min_replicas``) or at the autoscaling peak (``max_replicas``). Each
finding names the blocking resources, the deployments it competes with, and fixes to try.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from scripts.capacity.cluster import Cluster
from scripts.capacity.packing import NodeState, pack, replica_of
from scripts.capacity.spec import DeploymentSpec
from scripts.capacity.units import RAY_RESOURCE_SCALE, fmt_amount, fmt_number, fmt_resources, from_units, to_units


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
            return (f"{r}: {fmt_amount(r, self.largest_free)} free on one node, but not together with "
                    "the other resources a replica needs")
        if self.fragmented:
            return (f"{r}: {fmt_amount(r, self.free)} free in total but no node"
                    f"{' GPU' if r == 'GPU' and self.per_replica < 1 else ''} has "
                    f"{fmt_amount(r, self.per_replica)} free in one piece "
                    f"(largest {fmt_amount(r, self.largest_free)})")
        return (f"{r}: short by {fmt_amount(r, self.short)} (needs {fmt_amount(r, self.needed)}, "
                f"{fmt_amount(r, self.free)} free)")


@dataclass(frozen=True)
class Finding:
    """A problem with one deployment, and how to fix it."""

    deployment: str
    kind: str              # unschedulable_replica | missing_resource | min_replicas | max_replicas
    message: str
    fix: str
    shortages: tuple[Shortage, ...] = ()
    key: str | None = None  # the config key a key finding is about (renamed_key, moved_key, removed_key)

    def format(self) -> str:
        text = f"[{self.kind}] {self.deployment}: {self.message}"
        for s in self.shortages:
            text += f"\n      - {s.describe()}"
        return text + f"\n    fix: {self.fix}"


def _shortages(spec: DeploymentSpec, index: int, unplaced: int, states: list[NodeState]) -> tuple[Shortage, ...]:
    """The resources that stop the next replica of ``spec`` from being placed."""
    replica = replica_of(index, spec)
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
            free = sum(from_units(key, st.free[key]) for st in tracked)
            largest = max((from_units(key, st.free[key]) for st in tracked), default=0.0)
        needed = from_units(key, to_units(key, per) * unplaced)
        out.append(Shortage(key, needed=needed, free=free, per_replica=per, largest_free=largest))
    return tuple(out)


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
        at_start, at_peak, _, _ = pack(trial, cluster, skip)
        target = spec.min_replicas if phase == "min" else spec.max_replicas
        if (at_start if phase == "min" else at_peak)[index] >= target:
            return (f"use num_gpus: {fmt_number(share)} so {k} replicas share one GPU "
                    "(they also share its memory: check the Triton memory estimate, python -m scripts.capacity "
                    "--engine-config ... --replicas-per-gpu " + str(k) + ")")
    return None


def _competitors(specs: Sequence[DeploymentSpec], index: int, states: list[NodeState],
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
        parts = ", ".join(f"{k} {fmt_amount(k, held[(j, k)])}" for k in sorted(keys) if held[(j, k)] > 0)
        names.append(f"{specs[j].full_name} (holds {parts})")
    return names


def _add_capacity_fix(shortages: Sequence[Shortage], cluster: Cluster) -> str:
    parts = []
    for s in shortages:
        if s.resource == "GPU" and cluster.total("GPU") == 0:
            parts.append("start Ray with GPUs (ray start --num-gpus=N, or ray.init(num_gpus=N))")
        elif s.fragmented:
            parts.append(f"add a node with at least {fmt_amount(s.resource, s.per_replica)} {s.resource} free")
        else:
            amount = math.ceil(s.short) if s.resource not in ("memory",) else s.short
            parts.append(f"add {fmt_amount(s.resource, amount)} {s.resource} "
                         f"(in pieces of at least {fmt_amount(s.resource, s.per_replica)} per node)")
    return " and ".join(parts)  # every blocking resource must grow


def single_replica_finding(spec: DeploymentSpec, cluster: Cluster) -> Finding | None:
    """A finding when one replica fits on no empty node (or needs a resource no node has)."""
    replica = replica_of(0, spec)
    empty = [NodeState(n) for n in cluster.nodes]
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
                             f"{fmt_number(math.ceil(demand[key]))}}}') or remove it from ray_actor_options.resources")
        return Finding(spec.full_name, "missing_resource",
                       f"one replica needs {', '.join(f'{k} {fmt_number(demand[k])}' for k in absent)}, "
                       "which no node declares: every replica stays PENDING (infeasible)",
                       "; ".join(fixes))
    # Compare with the best node for each blocking resource.
    blocking = sorted({k for missing in lacks for k in missing}, key=lambda k: (k != "GPU", k))
    details, fixes = [], []
    for key in blocking:
        best = max(n.all_resources.get(key, 0) for n in cluster.nodes)
        need = demand[key]
        if key == "GPU" and cluster.total("GPU") == 0:
            details.append(f"GPU {fmt_number(need)} but the cluster declares no GPUs")
            fixes.append("start Ray with GPUs (ray start --num-gpus=N, or ray.init(num_gpus=N)), "
                         "or set num_gpus: 0 for a CPU replica")
            continue
        if best >= need:
            continue  # fits some node for this key, only not together with the others
        total = cluster.total(key)
        span = (f" (the cluster has {fmt_amount(key, total)} in total, but a replica is one actor on one node)"
                if total >= need else "")
        details.append(
            f"{key} {fmt_amount(key, need)} on one node; the largest node has {fmt_amount(key, best)}{span}")
        option = {"GPU": "num_gpus", "CPU": "num_cpus", "memory": "memory"}.get(key, f"resources.{key}")
        fixes.append(f"lower {option} to {fmt_amount(key, best)} "
                     f"or add a node with at least {fmt_amount(key, need)} {key}")
    if not details:  # every resource fits some node, but no node has all of them
        lacking = "; ".join(f"{st.node.name} lacks {', '.join(missing)}" for st, missing in zip(empty, lacks))
        details.append(f"{fmt_resources(demand)} together on one node, and no node has all of them ({lacking})")
        fixes.append(f"add a node with at least {fmt_resources(demand)}, or lower the request to fit one of the nodes")
    return Finding(spec.full_name, "unschedulable_replica",
                   "one replica needs " + "; ".join(details) + ": every replica stays PENDING",
                   "; ".join(fixes))


def gpu_not_requested_warning(spec: DeploymentSpec, cluster: Cluster) -> Finding | None:
    """A warning (not a failure) for a deployment that asks for no GPU on a cluster with GPUs.

    Ray sets no ``CUDA_VISIBLE_DEVICES`` for an actor given no GPU (ray 2.60,
    ``ray/_private/accelerators/accelerator.py``, ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO``): on a GPU
    node such a replica sees every GPU, outside Ray's accounting; and nothing keeps it off nodes
    without GPUs, where a GPU engine inside it cannot load.
    """
    if spec.gpu_requests or spec.hides_gpus or cluster.total("GPU") <= 0:
        return None
    without = [n.name for n in cluster.nodes if n.gpu <= 0]
    where = (f"; Ray may also place it on {'a node' if len(without) == 1 else 'nodes'} without GPUs "
             f"({', '.join(without)}), where a KIND_GPU model cannot load") if without else ""
    return Finding(spec.full_name, "gpu_not_requested",
                   f"asks for no GPU on a cluster with {fmt_number(cluster.total('GPU'))} GPU(s): Ray sets no "
                   f"CUDA_VISIBLE_DEVICES for it, so if it runs a GPU engine it uses GPUs Ray may give to other "
                   f"replicas{where}",
                   "if it uses a GPU, give it ray_actor_options.num_gpus (1, or its share); if it must not, hide "
                   "the GPUs with ray_actor_options.runtime_env.env_vars.RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO: \"1\"")


def _pending(n: int) -> str:
    return f"{n} stays PENDING" if n == 1 else f"{n} stay PENDING"


def shortfall_finding(specs: list[DeploymentSpec], cluster: Cluster, skip: set[int], i: int,
                       phase: str, placed: int, states: list[NodeState]) -> Finding:
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
    if cap is not None and any("max_replicas_per_node" in st.lacks(replica_of(i, spec), cap) for st in states):
        fixes.append(f"raise max_replicas_per_node (now {cap})")
    if "GPU" in keys:
        share = _gpu_share_fix(specs, cluster, i, skip, phase)
        if share:
            fixes.append(share)
    if rivals:
        fixes.append("lower the replicas or num_gpus of the deployments it competes with")
    fixes.append(_add_capacity_fix(shortages, cluster) if shortages else "add nodes")
    return Finding(spec.full_name, f"{phase}_replicas", message, ", or ".join(fixes), shortages)
