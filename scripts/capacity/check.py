"""The check: every deployment of a Serve config against a cluster, at min and at max replicas.

A deployment that asks for more than the cluster has does not fail loudly: its replicas stay
PENDING ("Resources requested ... are greater than ...", "infeasible"), and the Triton server
inside them never loads. :func:`check_capacity` finds those conflicts from the config alone.
It also reports the keys Ray 2.60 no longer takes (:mod:`~scripts.capacity.keycheck`), first, and
judges the rest of the config with each old key read as its replacement.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from scripts.capacity.cluster import Cluster, parse_cluster
from scripts.capacity.findings import Finding, gpu_not_requested_warning, shortfall_finding, single_replica_finding
from scripts.capacity.keycheck import deprecated_key_notes, serve_key_findings, upgrade_serve_keys
from scripts.capacity.packing import pack
from scripts.capacity.report import CapacityReport, DeploymentResult, NodeUsage
from scripts.capacity.spec import DeploymentSpec, parse_serve_config
from scripts.capacity.units import RAY_RESOURCE_SCALE, from_units


def check_capacity(serve_config: Any, cluster: Any) -> CapacityReport:
    """Check that every deployment of ``serve_config`` fits ``cluster`` at min and at max replicas.

    ``serve_config``: a parsed Serve config (see :func:`parse_serve_config`) or a list of
    :class:`DeploymentSpec`. ``cluster``: a :class:`Cluster` or its description (see
    :func:`parse_cluster`). A key Ray 2.60 rejects or drops (``target_num_ongoing_requests_per_replica``,
    ``max_concurrent_queries``, ...) is a finding, so the report fails; the capacity check reads it as
    the key that replaced it.
    """
    findings: list[Finding] = []
    if (isinstance(serve_config, (list, tuple)) and serve_config
            and all(isinstance(s, DeploymentSpec) for s in serve_config)):
        specs = list(serve_config)
    else:
        findings += serve_key_findings(serve_config)
        notes = deprecated_key_notes(serve_config)
        specs = [replace(s, notes=s.notes + notes[s.full_name]) if s.full_name in notes else s
                 for s in parse_serve_config(upgrade_serve_keys(serve_config))]
    if not isinstance(cluster, Cluster):
        cluster = parse_cluster(cluster)

    skip: set[int] = set()
    for i, spec in enumerate(specs):
        finding = single_replica_finding(spec, cluster)
        if finding is not None:
            findings.append(finding)
            skip.add(i)

    at_start, at_peak, start_states, peak_states = pack(specs, cluster, skip)
    for i, spec in enumerate(specs):
        if i in skip:
            continue
        if at_start[i] < spec.min_replicas:
            findings.append(shortfall_finding(specs, cluster, skip, i, "min", at_start[i], start_states))
        elif at_peak[i] < spec.max_replicas:
            findings.append(shortfall_finding(specs, cluster, skip, i, "max", at_peak[i], peak_states))

    results = tuple(DeploymentResult(s, at_start[i], at_peak[i], i not in skip) for i, s in enumerate(specs))
    usage = []
    for st in peak_states:
        capacity = st.node.all_resources
        used = {k: capacity[k] - from_units(k, st.free[k]) for k in st.free}
        used["GPU"] = st.node.gpu - sum(st.gpus) / RAY_RESOURCE_SCALE
        reps = {specs[j].full_name: c for j, c in sorted(st.replicas.items())}
        usage.append(NodeUsage(st.node.name, capacity, used, reps))
    warnings = tuple(w for w in (gpu_not_requested_warning(s, cluster) for s in specs) if w is not None)
    return CapacityReport(cluster, results, tuple(findings), tuple(usage), warnings)
