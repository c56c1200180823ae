from pathlib import Path
import pytest

from scripts import results


def test_record_merges_and_loads(build_root):
    results.record("99_demo", a=1)
    path = results.record("99_demo", b=[1, 2])
    assert path == build_root / "results" / "99_demo.json"
    assert results.load("99_demo") == {"a": 1, "b": [1, 2], results.BUILD_DIR_KEY: str(build_root)}


def test_load_missing_says_which_notebook_to_run(build_root):
    with pytest.raises(FileNotFoundError, match="run notebooks/42_nothing.ipynb first"):
        results.load("42_nothing")


def test_recorded_paths_are_found_under_a_copied_build_dir(build_root, tmp_path):
    recorded = {results.BUILD_DIR_KEY: "/elsewhere/build"}
    assert results.local_path(recorded, "/elsewhere/build/models/m") == build_root / "models" / "m"
    assert results.local_path(recorded, "/opt/models/m") == Path("/opt/models/m")
    assert results.local_path({}, "/elsewhere/build/x") == Path("/elsewhere/build/x")


def test_a_rehearsal_records_into_its_own_folder(build_root, tmp_path, monkeypatch):
    from scripts.paths import RESULTS_DIR_ENV

    results.record("05_serve_with_ray", profile="cpu")
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "rehearsal"))
    path = results.record("05_serve_with_ray", profile="gpu-trtllm@cpu")
    assert path == tmp_path / "rehearsal" / "05_serve_with_ray.json"
    monkeypatch.delenv(RESULTS_DIR_ENV)
    assert results.load("05_serve_with_ray")["profile"] == "cpu"  # the profile's own values are left as they were
