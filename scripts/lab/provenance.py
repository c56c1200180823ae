"""Where an executed notebook came from: the commit of the checkout that ran it and the GPU it ran on.

:mod:`scripts.lab.run_notebooks` writes :func:`provenance` into every copy it saves, as notebook
metadata under :data:`METADATA_KEY`::

    "tutorial": {"commit": "<40 hex> or null", "commit_from": "git" | "TUTORIAL_COMMIT" | null,
                 "dirty": true | false | null, "profile": "gpu-vllm",
                 "gpu": ["NVIDIA H100 80GB HBM3, 81559 MiB"] or null}

(papermill's own ``metadata.papermill`` already records the parameters.)

* ``commit``: ``git rev-parse HEAD`` when the repository root is a git checkout of its own; ``dirty``
  whether tracked files differed from it when the run started. A tree without ``.git`` (what
  ``env/gpu_host.sh start`` copies to the GPU host, what a lent machine receives) cannot tell: its
  commit comes from ``$TUTORIAL_COMMIT`` and its state from ``$TUTORIAL_DIRTY`` (``0``/``1``; unset:
  null, unknown). A ``$TUTORIAL_COMMIT`` that contradicts the checkout's own ``.git`` is an error.
* ``gpu``: one line per GPU of ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader``;
  null where there is no ``nvidia-smi`` or it fails.
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from scripts.paths import REPO_ROOT

METADATA_KEY = "tutorial"
COMMIT_ENV = "TUTORIAL_COMMIT"
DIRTY_ENV = "TUTORIAL_DIRTY"
GPU_QUERY = ("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: Path = REPO_ROOT) -> tuple[str, bool] | None:
    """``(HEAD, dirty)`` of the git checkout whose top level is ``root``; None when ``root`` is not one
    (no ``.git``, no git, or a folder inside some other repository). Dirty: a tracked file differs
    from HEAD (staged or not); untracked files do not count."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != Path(root).resolve():
        return None
    head = _git(root, "rev-parse", "--verify", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    if head is None or status is None:
        return None
    return head.strip(), bool(status.strip())


def parse_dirty(value: str | None) -> bool | None:
    """``$TUTORIAL_DIRTY`` as a bool: 1/true/yes or 0/false/no; unset or empty: None (unknown)."""
    if value is None or not value.strip():
        return None
    word = value.strip().lower()
    if word in {"1", "true", "yes"}:
        return True
    if word in {"0", "false", "no"}:
        return False
    raise SystemExit(f"{DIRTY_ENV}={value!r}: give 1 (the tree has uncommitted changes) or 0")


def commit_record(root: Path = REPO_ROOT, environ: Mapping[str, str] = os.environ) -> dict:
    """``commit``, ``commit_from`` and ``dirty`` of the tree at ``root`` (see the module's text)."""
    given = environ.get(COMMIT_ENV, "").strip() or None
    state = git_state(root)
    if state is not None:
        head, dirty = state
        if given is not None and not head.startswith(given):
            raise SystemExit(f"{COMMIT_ENV}={given} but the checkout at {root} is at {head}: "
                             f"unset {COMMIT_ENV} (git tells the commit here) or check out {given}")
        return {"commit": head, "commit_from": "git", "dirty": dirty}
    if given is not None:
        return {"commit": given, "commit_from": COMMIT_ENV, "dirty": parse_dirty(environ.get(DIRTY_ENV))}
    return {"commit": None, "commit_from": None, "dirty": None}


def gpu_models(query: tuple[str, ...] = GPU_QUERY) -> list[str] | None:
    """One ``name, memory.total`` line per GPU that ``nvidia-smi`` lists; None without a working ``nvidia-smi``."""
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def provenance(profile: str, root: Path = REPO_ROOT, environ: Mapping[str, str] = os.environ) -> dict:
    """What every copy of one run records under :data:`METADATA_KEY` (taken once, when the run starts)."""
    return {**commit_record(root, environ), "profile": profile, "gpu": gpu_models()}
