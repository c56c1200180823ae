"""One folder per GPU model, nine copies from one run at one commit (issue 46).

Every folder under ``docs/gpu-runs/`` that holds executed copies (``NN_*.ipynb``, at any depth) holds
one copy of each notebook of ``notebooks/``, and each copy records in its metadata
(``metadata["tutorial"]``, written by ``scripts.lab.run_notebooks``: :mod:`scripts.lab.provenance`) a
commit, the same in every copy, of a tree without uncommitted changes, and the GPUs it ran on, the same
in every copy. The committed ``notebooks/`` (what nbval compares) are not GPU copies and are not read here.

The folders made before copies recorded their commit are listed in :data:`MADE_BEFORE_THE_RECORD`, by name:
no copy of theirs records one, so none of them can pass, and each is to be replaced by a run of all nine
at one commit (issue 46). The list only shrinks: a folder on it must exist and still hold no record, and
any other folder, a new one included, is held to the rule.
"""
import json

import pytest

from scripts.lab.provenance import METADATA_KEY
from scripts.paths import NOTEBOOK_DIR, REPO_ROOT

GPU_RUNS_DIR = REPO_ROOT / "docs" / "gpu-runs"
NOTEBOOK_NAMES = sorted(p.name for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
ALL_FOLDERS = sorted({p.parent for p in GPU_RUNS_DIR.rglob("[0-9][0-9]_*.ipynb")})
#: Made before run_notebooks recorded the commit (2026-12-06/07): mixed commits, no record, or not all nine.
MADE_BEFORE_THE_RECORD = {"h200", "h200/failed", "h100-vllm", "h200-transformers"}
FOLDERS = [f for f in ALL_FOLDERS if str(f.relative_to(GPU_RUNS_DIR)) not in MADE_BEFORE_THE_RECORD]


def folder_id(folder):
    return str(folder.relative_to(GPU_RUNS_DIR))


def records(folder):
    """{copy's name: its metadata["tutorial"], or None where it has none}."""
    return {p.name: json.loads(p.read_text())["metadata"].get(METADATA_KEY)
            for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))}


def test_the_notebooks_are_the_nine_and_no_gpu_folder_is_theirs():
    assert [name[:2] for name in NOTEBOOK_NAMES] == [f"{i:02d}" for i in range(9)]
    assert NOTEBOOK_DIR not in ALL_FOLDERS and all(f.is_relative_to(GPU_RUNS_DIR) for f in ALL_FOLDERS)


@pytest.mark.parametrize("name", sorted(MADE_BEFORE_THE_RECORD))
def test_a_folder_made_before_the_record_still_exists_and_records_nothing(name):
    folder = GPU_RUNS_DIR / name
    assert folder in ALL_FOLDERS, f"{name} is gone or holds no copy: take it off MADE_BEFORE_THE_RECORD"
    recorded = [copy for copy, record in records(folder).items() if record]
    assert not recorded, f"{name} has copies that record their run ({recorded}): take it off MADE_BEFORE_THE_RECORD"


def problems(folder) -> list[str]:
    """What keeps ``folder`` from being one run of the nine at one clean commit on one GPU model."""
    names = sorted(p.name for p in folder.glob("[0-9][0-9]_*.ipynb"))
    missing, unknown = sorted(set(NOTEBOOK_NAMES) - set(names)), sorted(set(names) - set(NOTEBOOK_NAMES))
    out = [f"missing {missing}"] * bool(missing) + [f"not in notebooks/ {unknown}"] * bool(unknown)
    found = records(folder)
    unrecorded = [name for name, record in found.items() if not (record or {}).get("commit")]
    if unrecorded:
        return out + [f"no commit in metadata[{METADATA_KEY!r}] of {unrecorded}"]
    commits = {name: record["commit"] for name, record in found.items()}
    if len(set(commits.values())) != 1:
        out.append(f"copies from different commits: {commits}")
    not_clean = {name: record.get("dirty") for name, record in found.items() if record.get("dirty") is not False}
    if not_clean:
        out.append(f"uncommitted changes (true) or unknown (null) in {not_clean}")
    gpus = {name: record.get("gpu") for name, record in found.items()}
    if not all(gpus.values()) or len({tuple(g or ()) for g in gpus.values()}) != 1:
        out.append(f"not one GPU model recorded in every copy: {gpus}")
    return out


def test_every_gpu_run_folder_is_nine_copies_of_one_clean_commit_on_one_gpu():
    assert {folder_id(f): problems(f) for f in FOLDERS if problems(f)} == {}


def test_the_rule_names_a_missing_copy_mixed_commits_a_dirty_tree_and_mixed_gpus(tmp_path):
    def copy(name, commit="a" * 40, dirty=False, gpu=("NVIDIA H200, 143771 MiB",)):
        record = {"commit": commit, "dirty": dirty, "gpu": list(gpu)}
        (tmp_path / name).write_text(json.dumps({"cells": [], "metadata": {METADATA_KEY: record}}))
    for name in NOTEBOOK_NAMES:
        copy(name)
    assert problems(tmp_path) == []
    copy(NOTEBOOK_NAMES[7], commit="b" * 40)
    copy(NOTEBOOK_NAMES[6], dirty=None)
    copy(NOTEBOOK_NAMES[5], gpu=("NVIDIA H100 80GB HBM3, 81559 MiB",))
    (tmp_path / NOTEBOOK_NAMES[8]).unlink()
    found = problems(tmp_path)
    assert [p.split(" ")[0] for p in found] == ["missing", "copies", "uncommitted", "not"], found
