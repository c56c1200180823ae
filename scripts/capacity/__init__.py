"""Capacity checker: catch Ray Serve GPU-resource conflicts before deploying.

A Serve replica is one actor on one node, so it needs its whole ``ray_actor_options`` on a single
node. A deployment that asks for more than the cluster has does not fail loudly: its replicas stay
PENDING and the Triton server inside them never loads. :func:`check_capacity` packs every
deployment's replicas onto the cluster's nodes, the way the scheduler would have to, and reports
what cannot be placed, which resource is short by how much, and a concrete fix.

One module per step: :mod:`~scripts.capacity.units` (validation, sizes, printing),
:mod:`~scripts.capacity.spec` (the Serve config), :mod:`~scripts.capacity.cluster` (the nodes, from
a file or a live Ray cluster), :mod:`~scripts.capacity.packing`, :mod:`~scripts.capacity.findings`,
:mod:`~scripts.capacity.report`, :mod:`~scripts.capacity.check` and :mod:`~scripts.capacity.cli`
(``python -m scripts.capacity``). Serve's own controller and proxy actors request 0 CPUs and are
ignored; on a live cluster, other actors already running are not subtracted.

Keys Ray 2.60 no longer takes (``target_num_ongoing_requests_per_replica``, ``max_concurrent_queries``,
``host`` inside an application, ...) are :mod:`~scripts.capacity.renamed` (the table, with the Ray source
of each current name) and :mod:`~scripts.capacity.keycheck`: :func:`check_serve_keys` runs before
``serve deploy`` without a cluster, and :func:`check_capacity` fails its report on them.

The GPU memory of Triton model instances (``instance_group { count }``) is
:mod:`~scripts.capacity.instance_memory` (what one instance needs: :mod:`~scripts.capacity.instance_size`;
instances loading one after another or in parallel: :mod:`~scripts.capacity.serial_loading`,
:mod:`~scripts.capacity.parallel_loading`); the command line checks both.
"""
from scripts.capacity.check import check_capacity
from scripts.capacity.cluster import Cluster, Node, absent_accelerator_type, cluster_from_ray, parse_cluster
from scripts.capacity.findings import Finding, Shortage
from scripts.capacity.keycheck import check_serve_keys, serve_key_findings, upgrade_serve_keys
from scripts.capacity.renamed import KEY_CHANGES, KeyChange
from scripts.capacity.report import CapacityReport, DeploymentResult, NodeUsage
from scripts.capacity.spec import DeploymentSpec, parse_serve_config
from scripts.capacity.units import CapacityConfigError, format_bytes, parse_memory

__all__ = ["KEY_CHANGES", "CapacityConfigError", "CapacityReport", "Cluster", "DeploymentResult", "DeploymentSpec",
           "Finding", "KeyChange", "Node", "NodeUsage", "Shortage", "absent_accelerator_type", "check_capacity", "check_serve_keys",
           "cluster_from_ray", "format_bytes", "parse_cluster", "parse_memory", "parse_serve_config",
           "serve_key_findings", "upgrade_serve_keys"]
