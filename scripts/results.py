"""Key values a notebook's final check cell records, for pytest to assert after the run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.paths import results_path


def record(notebook: str, **values: Any) -> Path:
    """Merge ``values`` into ``build/results/<notebook>.json`` and return its path."""
    path = results_path(notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load(notebook) if path.exists() else {}
    data.update(values)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def load(notebook: str) -> dict[str, Any]:
    path = results_path(notebook)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run notebooks/{notebook}.ipynb first")
    return json.loads(path.read_text())
