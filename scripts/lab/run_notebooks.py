"""Execute the notebooks in order with papermill (``make run``), one summary line per notebook.

``python -m scripts.lab.run_notebooks --profile cpu`` writes executed copies under ``build/executed``.
``--inplace`` re-executes the committed notebooks themselves (maintainers, before committing),
so their saved outputs are the outputs of a top-to-bottom run.

A notebook whose ``parameters`` cell has ``SMOKE`` (notebook 07's benchmark) runs with ``SMOKE = True``
here (``make run``), in full with ``--full`` (``make bench``) and with ``--inplace`` (its committed
outputs are a full run); ``-p 07:SMOKE false`` runs one of them in full and leaves the others at
``SMOKE``. ``--nbval-targets DIR`` prints what ``make test`` gives nbval: the notebooks without
``SMOKE`` as they are, and for the others a copy in ``DIR`` with ``SMOKE = True`` injected by papermill
(not executed: nbval executes it and compares with the committed outputs).
A notebook the profile lists under ``skip_notebooks`` (``env/profiles.toml``) is not run; its line
says why (:func:`plan`).

Every copy it saves, ``--inplace`` included, records where it came from in its notebook metadata
(``metadata["tutorial"]``: the checkout's commit, whether the tree was dirty, the profile, the GPUs;
:mod:`scripts.lab.provenance`), taken once when the run starts. Papermill itself writes it, with
the rest of the notebook, at every save: a copy that failed half-way records it too.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

from scripts.lab.provenance import METADATA_KEY, provenance
from scripts.paths import NOTEBOOK_DIR, REPO_ROOT, RESULTS_DIR_ENV, executed_dir
from scripts.profiles import REHEARSAL_MARK

DEFAULT_PROFILE = "cpu"
#: The kernel talks to papermill over Unix sockets (IPC) rather than loopback TCP: no ports, and
#: no "Kernel is running over TCP without encryption" warning (ipykernel 7) in every notebook's output.
KERNEL_CONFIG = {"KernelManager": {"transport": "ipc"}}


def notebook_paths(directory: Path = NOTEBOOK_DIR, only: list[str] | None = None) -> list[Path]:
    """``NN_verb_topic.ipynb`` files in order; ``only`` keeps those whose name starts with a given prefix."""
    paths = sorted(p for p in directory.glob("[0-9][0-9]_*.ipynb"))
    if only:
        paths = [p for p in paths if any(p.name.startswith(o) for o in only)]
        if not paths:
            raise SystemExit(f"no notebook in {directory} starts with any of {only}")
    return paths


def plan(profile: str, only: list[str] | None = None,
         directory: Path = NOTEBOOK_DIR) -> tuple[list[Path], dict[Path, str]]:
    """The notebooks to run on ``profile``, and those it skips with the reason its settings give."""
    from scripts.profiles import load_profile  # noqa: PLC0415

    skipped = load_profile(profile).skipped_notebooks()
    unknown = sorted(set(skipped) - {p.stem for p in notebook_paths(directory)})
    if unknown:
        raise SystemExit(f"skip_notebooks of profile {profile} names no notebook in {directory}: {unknown}")
    paths = notebook_paths(directory, only)
    return [p for p in paths if p.stem not in skipped], {p: skipped[p.stem] for p in paths if p.stem in skipped}


def has_smoke(path: Path) -> bool:
    """Whether the notebook's ``parameters`` cell declares ``SMOKE``."""
    import papermill as pm  # noqa: PLC0415

    return "SMOKE" in pm.inspect_notebook(str(path))


def nbval_targets(directory: Path, paths: list[Path]) -> list[Path]:
    """The notebooks as nbval should run them: SMOKE notebooks as prepared copies in ``directory``."""
    import papermill as pm  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    targets = []
    for path in paths:
        if has_smoke(path):
            copy = directory / path.name
            pm.execute_notebook(str(path), str(copy), parameters={"SMOKE": True}, prepare_only=True,
                                kernel_name="python3", language="python", progress_bar=False)
            targets.append(copy)
        else:
            targets.append(path)
    return targets


#: The papermill engine of :func:`execute`: nbclient's, plus the run's record in the notebook's metadata.
RECORDING_ENGINE = "tutorial-recording"


@functools.cache
def recording_engine() -> str:
    """Register (once) and name papermill's nbclient engine with one addition: ``record=`` (a dict) goes
    into ``metadata["tutorial"]`` before papermill's first save, so every save of the copy (each cell's,
    the final one, the one that keeps an error) writes it with papermill's own formatting."""
    from papermill.engines import NBClientEngine, papermill_engines  # noqa: PLC0415

    class RecordingEngine(NBClientEngine):
        @classmethod
        def execute_notebook(cls, nb, kernel_name, record=None, **kwargs):
            if record is not None:
                nb.metadata[METADATA_KEY] = record
            return super().execute_notebook(nb, kernel_name, **kwargs)

    papermill_engines.register(RECORDING_ENGINE, RecordingEngine)
    return RECORDING_ENGINE


def execute(path: Path, output: Path, profile: str, progress: bool = True, parameters: dict | None = None,
            record: dict | None = None) -> float:
    """Run one notebook top to bottom; papermill's bar counts its cells as they run (on stderr).
    ``parameters`` replace values of the notebook's ``parameters`` cell (``PROFILE`` comes from ``profile``);
    ``record`` (:func:`scripts.lab.provenance.provenance`) goes into the copy's ``metadata["tutorial"]``."""
    import papermill as pm
    from traitlets.config import Config  # noqa: PLC0415

    parameters = dict(parameters or {}) | ({} if profile == DEFAULT_PROFILE else {"PROFILE": profile})
    start = time.monotonic()
    pm.execute_notebook(str(path), str(output), parameters=parameters, cwd=str(path.parent),
                        kernel_name="python3", language="python", progress_bar=progress and {"desc": path.stem[:2], "unit": "cell"},
                        log_output=False, config=Config(KERNEL_CONFIG), engine_name=recording_engine(), record=record)
    return time.monotonic() - start


def parameter_names(path: Path) -> set[str]:
    """The names assigned in a notebook's ``parameters`` cell."""
    import ast  # noqa: PLC0415

    cells = json.loads(path.read_text())["cells"]
    source = next(("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])), "")
    return {t.id for node in ast.parse(source).body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)}


def notebook_parameters(path: Path, pairs: list[list[str]]) -> dict:
    """The ``-p NAME VALUE`` pairs this notebook has a parameter for, values read as YAML. ``PREFIX:NAME``
    reaches only the notebooks whose name starts with PREFIX (``06:INSTANCE_COUNT``: notebook 02 has an
    ``INSTANCE_COUNT`` too)."""
    import yaml  # noqa: PLC0415

    names = parameter_names(path)
    chosen = {}
    for key, value in pairs:
        prefix, _, name = key.rpartition(":")
        if name in names and path.stem.startswith(prefix):
            chosen[name] = yaml.safe_load(value)
    return chosen


def run_parameters(path: Path, pairs: list[list[str]], full: bool = False) -> dict:
    """What papermill gives the notebook: ``SMOKE = True`` where it has ``SMOKE`` and the run is not
    ``full``, then the ``-p`` pairs it has (:func:`notebook_parameters`), which win: ``-p 07:SMOKE false``
    runs notebook 07 in full while the others of the same run keep their ``SMOKE`` setting."""
    smoke = {"SMOKE": True} if not full and has_smoke(path) else {}
    return smoke | notebook_parameters(path, pairs)


def describe(record: dict) -> str:
    """The run's record in one line, printed before its first notebook."""
    dirty = {True: ", dirty", False: "", None: ", dirty unknown"}[record["dirty"]]
    source = record["commit_from"] or "no .git and no TUTORIAL_COMMIT"
    gpus = "; ".join(record["gpu"]) if record["gpu"] else "none"
    return f"commit {record['commit'] or 'unknown'} ({source}{dirty}), GPU {gpus}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--inplace", action="store_true", help="overwrite the committed notebooks with the executed ones")
    parser.add_argument("--only", nargs="*", help="notebook name prefixes, e.g. 00 03")
    parser.add_argument("--full", action="store_true", help="run SMOKE notebooks in full (make bench)")
    parser.add_argument("--nbval-targets", metavar="DIR", help="print the paths nbval should run, SMOKE copies in DIR")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a parameter of the notebooks that have it, as papermill's -p (VALUE read as YAML: "
                             "-p CONCURRENCY '[1, 32, 128]'); notebooks without that parameter are run without it; "
                             "PREFIX:NAME for the notebooks whose name starts with PREFIX only (-p 06:INSTANCE_COUNT 2)")
    parser.add_argument("--out", type=Path, help="folder for the executed copies (default build/executed/<profile>)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.nbval_targets:
        print(" ".join(str(p) for p in nbval_targets(Path(args.nbval_targets), notebook_paths(only=args.only))))
        return 0
    out_dir = args.out or executed_dir(args.profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    paths, skipped = plan(args.profile, args.only)
    record = provenance(args.profile) if paths else None  # before the first copy: --inplace changes tracked files
    if record:
        print(describe(record), flush=True)
    if REHEARSAL_MARK in args.profile:  # a rehearsal records beside its copies, not over the profile's own values
        results = Path(os.environ.setdefault(RESULTS_DIR_ENV, str(out_dir / "results")))
        print(f"rehearsal {args.profile}: check cells record into {results}", flush=True)
    for path, reason in skipped.items():
        print(f"{path.stem:<32} skipped on {args.profile}: {reason}", flush=True)
    for path in paths:
        target = path if args.inplace else out_dir / path.name
        parameters = run_parameters(path, args.parameter, full=args.full or args.inplace)
        print(f"{path.stem:<32} running{' (SMOKE)' if parameters.get('SMOKE') else ''} ...", flush=True)
        try:
            seconds = execute(path, target, args.profile, parameters=parameters, record=record)
            print(f"{path.stem:<32} ok      {seconds:6.1f} s  -> {target.relative_to(REPO_ROOT) if target.is_relative_to(REPO_ROOT) else target}", flush=True)
        except Exception as exc:  # papermill raises PapermillExecutionError with the failing cell
            failed += 1
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            print(f"{path.stem:<32} FAILED  {first}", flush=True)
            print(f"    executed copy with the error: {target}", flush=True)
            break  # later notebooks read what this one should have made
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
