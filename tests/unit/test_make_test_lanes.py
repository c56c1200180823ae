"""`make test` runs in two lanes side by side (Makefile): every notebook runs in exactly one lane,
after the notebooks it reads, and the unit tests run too."""
import re
import subprocess

from scripts.lab.run_notebooks import notebook_paths
from scripts.paths import REPO_ROOT


def dry_run() -> list[str]:
    """The lanes' commands in an order make may run them (make -n prints each recipe line, dependencies first)."""
    out = subprocess.run(["make", "-n", "--no-print-directory", "-j1", "lane-notebooks", "lane-side"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "pytest" in line]


def notebooks_of(command: str) -> list[str]:
    match = re.search(r"--only ([0-9 ]+)\)", command)
    return match.group(1).split() if match else []


def test_every_notebook_runs_in_exactly_one_lane_and_the_unit_tests_run():
    commands = dry_run()
    lanes = [notebooks_of(c) for c in commands]
    ran = [nb for lane in lanes for nb in lane]
    assert sorted(ran) == [p.name[:2] for p in notebook_paths()] and len(ran) == len(set(ran)), lanes
    assert sum("pytest -q tests/unit" in c for c in commands) == 1, commands
    assert all("set -o pipefail" in c and "| sed -u 's/^/[" in c for c in commands), "a lane's failure must reach make"


def test_notebooks_run_after_the_ones_they_read():
    lanes = [notebooks_of(c) for c in dry_run()]
    first = next(i for i, lane in enumerate(lanes) if "00" in lane)
    assert lanes[first] == sorted(lanes[first]) and "01" in lanes[first], lanes
    for i, lane in enumerate(lanes):
        if lane and i != first:
            assert i > first and lane == sorted(lane), lanes  # after the model and engine settings, in order
    with_05 = next(lane for lane in lanes if "05" in lane)
    assert "07" in with_05 and "03" in with_05 and "04" in with_05, lanes  # one Serve repository; 03's reference
