"""scripts.capacity.check: the whole check, and the names the package exports."""
import scripts.capacity
from capacity_builders import app, dep, nodes
from scripts.capacity import check_capacity, parse_cluster, parse_serve_config


def test_everything_fits():
    report = check_capacity(app(dep("Triton", 1, autoscale=(1, 2)), dep("Ingress")), nodes(2))
    assert report.ok and report.findings == ()
    assert report.result("Triton").max_placed == 2 and report.result("llm/Ingress").min_placed == 1
    assert "Result: OK" in report.format_report()


def test_parsed_specs_and_cluster_give_the_same_report():
    config, cluster = app(dep("T", 0.5, autoscale=(1, 3))), nodes(1)
    direct = check_capacity(config, cluster)
    parsed = check_capacity(parse_serve_config(config), parse_cluster(cluster))
    assert direct.format_report() == parsed.format_report() and not direct.ok


def test_the_package_exports_what_notebooks_and_tests_import():
    for name in ("check_capacity", "cluster_from_ray", "parse_cluster", "parse_serve_config", "parse_memory",
                 "CapacityConfigError", "Cluster", "Node", "CapacityReport", "DeploymentSpec"):
        assert name in scripts.capacity.__all__ and hasattr(scripts.capacity, name), name
    assert issubclass(scripts.capacity.CapacityConfigError, ValueError)
