import io
import json
import re
import sys

from scripts.lab import nbval_lanes
from scripts.lab.run_notebooks import notebook_paths


def stage_of(prefix):
    return next(i for i, stage in enumerate(nbval_lanes.STAGES) for lane in stage if prefix in lane)


def lane_of(prefix):
    return next(lane for stage in nbval_lanes.STAGES for lane in stage if prefix in lane)


def test_every_notebook_is_in_exactly_one_lane():
    declared = [n for stage in nbval_lanes.STAGES for lane in stage for n in lane]
    assert sorted(declared) == sorted(p.name[:2] for p in notebook_paths())
    assert len(declared) == len(set(declared))


def test_what_the_others_read_is_made_in_an_earlier_stage():
    assert all(stage_of(n) == 0 for n in ("00", "01", "02", "03"))
    assert all(stage_of(p.name[:2]) > 0 for p in notebook_paths() if p.name[:2] > "03")


def test_notebooks_in_other_lanes_fill_the_serve_repository_the_same_way():
    """05 and 07 run in different lanes and both fill the Serve repository: only a fill that comes out
    the same leaves the folders a starting Triton reads untouched (fill_repository; its unit test), so
    each must fill it with the profile's own settings, nothing of its own, or share a lane."""
    calls = {p.name[:2]: re.findall(r"fill_serve_repository\(([^)]*)\)",
                                    "".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"]
                                            if c["cell_type"] == "code"))
             for p in notebook_paths()}
    fillers = {n: args for n, args in calls.items() if args}
    assert len(fillers) >= 2  # 05 and 07: the case this rule exists for
    if len({lane_of(n) for n in fillers}) > 1:
        assert all(args == ["profile"] for args in fillers.values()), fillers


def test_one_lane_runs_a_stage_in_notebook_order():
    stage = nbval_lanes.STAGES[1]
    assert nbval_lanes.lanes_of(stage, side_by_side=True) == list(stage)
    assert nbval_lanes.lanes_of(stage, side_by_side=False) == [tuple(sorted(n for lane in stage for n in lane))]


def test_a_lane_prints_one_line_per_notebook_and_per_slow_cell_and_passes_the_rest_through():
    out, ticks = io.StringIO(), iter([0, 10, 12, 40])
    lane = nbval_lanes.LaneOutput("05 07", out, clock=lambda: next(ticks), slow_s=20)
    for text in ["build/smoke/05_serve::ipynb::Cell 0 PASSED        [ 1%]\n",  # as nbval 0.11 names them
                 "build/smoke/05_serve::ipynb::Cell 1 FAILED        [ 2%]\n",
                 "build/smoke/07_bench.ipynb::Cell 0 PASSED [ 3%]\n",
                 "E   cell output differs\n", "\n"]:
        lane.line(text)
    lane.close()
    assert out.getvalue().splitlines() == [
        "[05 07] 05_serve: 1 failed, 1 passed cells (12 s)",
        "[05 07] 07_bench: Cell 0 passed after 28 s",
        "[05 07] E   cell output differs",
        "[05 07] 07_bench: 1 passed cells (28 s)",
    ]


def test_lanes_run_side_by_side_and_the_worst_exit_status_wins():
    out = io.StringIO()
    code = nbval_lanes.run_lanes({"a": [sys.executable, "-c", "print('from a')"],
                                  "b": [sys.executable, "-c", "import sys; print('from b'); sys.exit(3)"]}, out)
    assert code == 3
    assert sorted(out.getvalue().splitlines()) == ["[a] from a", "[b] from b"]


def test_the_lane_command_is_pytest_over_the_lanes_targets(tmp_path):
    cmd = nbval_lanes.lane_command(("00", "01"), tmp_path, ["--nbval"])
    assert cmd[:3] == [sys.executable, "-m", "pytest"] and "--nbval" in cmd
    assert [c.rsplit("/", 1)[-1][:2] for c in cmd if c.endswith(".ipynb")] == ["00", "01"]
