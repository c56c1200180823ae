"""Progress of a long plan as one line of a notebook's output, updated in place.

``run_plan`` (scripts/bench/vllm_bench.py) reports each run as it ends; a sweep of dozens of runs would
print dozens of lines that a reader scrolls past (CONTRIBUTING.md: no cell over 40 lines).
:class:`OneLine` shows ``done/total`` and the last run's line instead, through IPython's
``display_id`` (papermill keeps only the last state), and appends every line to a log file::

    progress = OneLine(len(runs), result_dir / "progress.log", then=meter.mark)
    rows = run_plan(runs, result_dir, echo=progress)
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from scripts.paths import shown


class OneLine:
    def __init__(self, total: int, log_path: str | Path, then: Callable[[], None] | None = None, what: str = "runs"):
        self.total, self.done, self.what, self.then = total, 0, what, then
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")
        self.handle = None
        try:
            from IPython import get_ipython  # noqa: PLC0415
            from IPython.display import Pretty, display  # noqa: PLC0415

            if get_ipython() is not None:
                self.handle = display(Pretty(self.text()), display_id=True)
        except ImportError:
            pass

    def text(self, last: str = "") -> str:
        line = f"{self.done}/{self.total} {self.what} done"
        if last:
            line += f"; the last: {' '.join(last.split())}"
        return f"{line} (every run's line: {shown(self.log_path)})"

    def __call__(self, line: str) -> None:
        self.done += 1
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(line.rstrip("\n") + "\n")
        if self.then is not None:
            self.then()
        if self.handle is not None:
            from IPython.display import Pretty  # noqa: PLC0415

            self.handle.update(Pretty(self.text(line)))
        elif self.done == self.total:
            print(self.text(line), flush=True)
