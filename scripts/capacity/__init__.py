"""Capacity checker: catch Ray Serve GPU-resource conflicts before deploying.

Why it is built this way, and the sources: docs/design/capacity.md.
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
