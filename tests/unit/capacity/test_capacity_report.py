"""scripts.capacity.report: the printed report and looking results up."""
import pytest

from capacity_builders import app, dep, nodes
from scripts.capacity import check_capacity


def test_report_lists_nodes_and_notes():
    text = check_capacity([dep("A", 1, replicas="auto")], nodes(1)).format_report()
    assert "n0: GPU 1/1, CPU 1/16, memory 0 MiB/64.0 GiB | A x1" in text
    assert "note: num_replicas: auto" in text and "1 of max_replicas=100" in text


def test_failing_report_numbers_findings_and_ends_with_the_result():
    text = check_capacity(app(dep("Triton", 1, autoscale=(1, 4), num_cpus=2)), nodes(2)).format_report()
    lines = text.splitlines()
    assert lines[0] == "Cluster: 1 node(s), GPU 2, CPU 16, memory 64.0 GiB"
    assert "placed 1/1 at start, 2/4 at peak" in text and "GPU: short by 2" in text
    assert "  1. [max_replicas] llm/Triton" in text
    assert lines[-1] == "Result: FAIL (1 problem(s): replicas that cannot be placed stay PENDING)"


def test_result_by_full_or_bare_name():
    report = check_capacity(app(dep("A"), dep("B")), nodes(0))
    assert report.result("A") is report.result("llm/A") and report.ok
    assert report.format_report().endswith("Result: OK (every deployment fits at min and max replicas)")
    with pytest.raises(KeyError, match="'C' names 0 deployments"):
        report.result("C")
