"""``make test``'s notebook step: nbval over the notebooks in stages, the lanes of a stage side by side.

Notebooks 00-03 make what the others read (the model, the engine, the repository, the reference), so
they run first, one after the other. 04-08 read those and nothing of one another's, and most of their
time is servers starting and clients waiting, so on two cores two lanes side by side take less than
one. 05 and 07 both fill the Serve repository their Tritons load; a fill leaves a model folder that
comes out the same untouched (``fill_repository``), so they may run side by side, and the lanes are
balanced by measured cost: 04 then 05 (245 s) beside 07 then 08 (318-338 s), where 04 08 | 05 07 took
277 | 355 s (fresh clones' make test on a 2-core AMD EPYC, 2026-12-07). Under that load Triton 2.51's
Python backend can stall a load (a replica's Triton in 05 once did): the start sees it and starts the
server again (``TritonServer.start``, ``crashes.stalled_loads``). 06 runs alone, last: beside another
lane its deployments (about 20, each waited for) took 243 s instead of about 75 (2026-12-06).

``python -m scripts.lab.nbval_lanes -- NBVAL_OPTIONS`` runs them; ``--lanes 1`` runs every notebook
one after the other (to read one notebook's failure without another's lines in between). One line
per notebook as it ends and one per cell that took over 20 s; a lane's other lines (failures,
pytest's summary) pass through with the lane's name in front.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from scripts.lab.run_notebooks import nbval_targets, notebook_paths

#: Stages run one after the other; the lanes inside a stage run side by side.
STAGES: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("00", "01", "02", "03"),),
    (("04", "05"), ("07", "08")),  # about 4 and 5.5 minutes on two cores
    (("06",),),  # about 20 Serve deployments, each waited for: beside another lane, 3 times slower
)
#: nbval 0.11 names a cell ``notebooks/00_check_environment::ipynb::Cell 3`` under ``pytest -v``.
CELL = re.compile(r"^(?P<path>\S+?)(?:\.|::)ipynb::(?P<cell>Cell \d+) (?P<outcome>PASSED|FAILED|ERROR|SKIPPED)")


def lanes_of(stage: tuple[tuple[str, ...], ...], side_by_side: bool) -> list[tuple[str, ...]]:
    """The lanes of one stage: as declared, or all in one lane, in notebook order."""
    return list(stage) if side_by_side else [tuple(sorted(n for lane in stage for n in lane))]


def lane_command(lane: tuple[str, ...], smoke_dir: Path, nbval_args: list[str]) -> list[str]:
    targets = nbval_targets(smoke_dir, notebook_paths(only=list(lane)))
    return [sys.executable, "-m", "pytest", "-v", "--no-header", "-p", "no:cacheprovider", *nbval_args,
            *(str(t) for t in targets)]


class LaneOutput:
    """Turns a lane's ``pytest -v`` lines into one line per notebook and one per cell slower than
    ``slow_s`` (so a long cell says it is done); passes the rest through."""

    def __init__(self, name: str, out=None, clock=time.monotonic, slow_s: float = 20.0):
        self.name, self.out, self.clock, self.slow_s = name, out or sys.stdout, clock, slow_s
        self.current: str | None = None
        self.started = self.last = clock()
        self.cells: dict[str, int] = {}

    def _say(self, text: str) -> None:
        print(f"[{self.name}] {text}", file=self.out, flush=True)

    def _finish_notebook(self) -> None:
        if self.current is not None:
            counts = ", ".join(f"{n} {o.lower()}" for o, n in sorted(self.cells.items()))
            self._say(f"{Path(self.current).stem}: {counts} cells ({self.last - self.started:.0f} s)")

    def line(self, text: str) -> None:
        match = CELL.match(text)
        if not match:
            if text.strip():
                self._say(text.rstrip())
            return
        now = self.clock()
        if match["path"] != self.current:
            self._finish_notebook()
            self.current, self.cells, self.started = match["path"], {}, self.last  # from the previous one's end
        if now - self.last >= self.slow_s:
            self._say(f"{Path(match['path']).stem}: {match['cell']} {match['outcome'].lower()} after {now - self.last:.0f} s")
        self.cells[match["outcome"]] = self.cells.get(match["outcome"], 0) + 1
        self.last = now

    def close(self) -> None:
        self._finish_notebook()
        self.current = None


def run_lanes(commands: dict[str, list[str]], out=None) -> int:
    """Run the commands side by side; the worst exit status (a failing lane does not stop the others)."""
    procs = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
             for name, cmd in commands.items()}

    def pump(name: str, proc: subprocess.Popen) -> None:
        output = LaneOutput(name, out)
        for text in proc.stdout:
            output.line(text)
        output.close()

    threads = [threading.Thread(target=pump, args=item, daemon=True) for item in procs.items()]
    for t in threads:
        t.start()
    try:
        codes = [proc.wait() for proc in procs.values()]
    finally:
        for proc in procs.values():  # interrupted: the lanes' pytest processes end with us
            if proc.poll() is None:
                proc.terminate()
    for t in threads:
        t.join()
    return max(codes, default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke-dir", type=Path, default=Path("build/smoke"))
    parser.add_argument("--lanes", type=int, choices=(1, 2), default=2, help="2: side by side; 1: one after the other")
    parser.add_argument("nbval_args", nargs=argparse.REMAINDER, help="after --: the options nbval runs with")
    args = parser.parse_args(argv)
    nbval_args = [a for a in args.nbval_args if a != "--"]
    worst = 0
    for stage in STAGES:
        lanes = lanes_of(stage, side_by_side=args.lanes == 2)
        started = time.monotonic()
        code = run_lanes({" ".join(lane): lane_command(lane, args.smoke_dir, nbval_args) for lane in lanes})
        print(f"notebooks {', '.join(' '.join(lane) for lane in lanes)}: exit status {code}, "
              f"{time.monotonic() - started:.0f} s", flush=True)
        worst = max(worst, code)
        if code:  # the next stage reads what this one made
            break
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
