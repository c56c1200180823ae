"""Key values a notebook's final check cell records, for pytest to assert after the run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.paths import build_dir, results_path

#: The build directory a run recorded into: paths recorded under it are found again under a copy.
BUILD_DIR_KEY = "_build_dir"


def record(notebook: str, **values: Any) -> Path:
    """Merge ``values`` into ``build/results/<notebook>.json`` and return its path."""
    path = results_path(notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load(notebook) if path.exists() else {}
    data.update(values)
    data[BUILD_DIR_KEY] = str(build_dir())
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def load(notebook: str) -> dict[str, Any]:
    path = results_path(notebook)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run notebooks/{notebook}.ipynb first")
    return json.loads(path.read_text())


def local_path(recorded: dict[str, Any], value: str) -> Path:
    """A path a run recorded, found under this build directory when the run's build directory was
    copied here (the GPU runs under docs/gpu-runs keep theirs)."""
    path, old = Path(value), recorded.get(BUILD_DIR_KEY)
    if old and path.is_relative_to(old):
        return build_dir() / path.relative_to(old)
    return path
