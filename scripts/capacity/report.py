"""The capacity report: what was placed, per deployment and per node, and the findings, printed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from scripts.capacity.cluster import Cluster
from scripts.capacity.findings import Finding
from scripts.capacity.renamed import KEY_KINDS
from scripts.capacity.spec import DeploymentSpec
from scripts.capacity.units import fmt_amount, fmt_resources


@dataclass(frozen=True)
class DeploymentResult:
    """How many replicas of one deployment were placed."""

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
    """The whole check: per deployment, per node at the peak, the findings, and the printed report."""

    cluster: Cluster
    deployments: tuple[DeploymentResult, ...]
    findings: tuple[Finding, ...]
    nodes: tuple[NodeUsage, ...]
    warnings: tuple[Finding, ...] = ()   # worth knowing, but nothing stays pending because of them

    @property
    def ok(self) -> bool:
        return not self.findings and all(d.ok for d in self.deployments)

    def result(self, name: str) -> DeploymentResult:
        """The result of deployment ``name`` (``"app/name"`` or the bare name when unique)."""
        hits = [d for d in self.deployments if name in (d.spec.full_name, d.spec.name)]
        if len(hits) != 1:
            raise KeyError(f"{name!r} names {len(hits)} deployments")
        return hits[0]

    def format_report(self) -> str:
        lines = [self.cluster.format(), "", "Deployments (per replica; replicas placed at start / at peak):"]
        for d in self.deployments:
            s = d.spec
            status = "OK  " if d.ok else "FAIL"
            scale = (f"min {s.min_replicas}, max {s.max_replicas} (autoscaling)" if s.autoscaling
                     else f"num_replicas {s.min_replicas}")
            lines.append(f"  [{status}] {s.full_name}: {fmt_resources(s.demand)}; {scale}; "
                         f"placed {d.min_placed}/{s.min_replicas} at start, {d.max_placed}/{s.max_replicas} at peak")
            lines.extend(f"         note: {n}" for n in s.notes)
        lines += ["", "Nodes at peak:"]
        for n in self.nodes:
            keys = [k for k in ("GPU", "CPU", "memory") if k in n.capacity]
            keys += sorted(k for k in n.capacity if k not in keys and n.used.get(k))
            used = ", ".join(f"{k} {fmt_amount(k, n.used.get(k, 0))}/{fmt_amount(k, n.capacity[k])}" for k in keys)
            reps = ", ".join(f"{name} x{count}" for name, count in n.replicas.items()) or "no replicas"
            lines.append(f"  {n.name}: {used} | {reps}")
        lines.append("")
        if self.warnings:
            lines.append("Warnings:")
            for f in self.warnings:
                lines.append("  - " + f.format().replace("\n", "\n   "))
            lines.append("")
        if self.findings:
            lines.append("Findings:")
            for i, f in enumerate(self.findings, 1):
                lines.append(f"  {i}. " + f.format().replace("\n", "\n   "))
            keys = sum(f.kind in KEY_KINDS for f in self.findings)
            why = "replicas that cannot be placed stay PENDING" if keys < len(self.findings) else ""
            if keys:
                why = (f"{keys} Serve config key(s) that Ray 2.60 rejects or drops without an error"
                       + (f"; {why}" if why else ": fix them before serve deploy"))
            lines += ["", f"Result: FAIL ({len(self.findings)} problem(s): {why})"]
        else:
            lines.append("Result: OK (every deployment fits at min and max replicas)")
        return "\n".join(lines)
