import pytest

from scripts import results


def test_record_merges_and_loads(build_root):
    results.record("99_demo", a=1)
    path = results.record("99_demo", b=[1, 2])
    assert path == build_root / "results" / "99_demo.json"
    assert results.load("99_demo") == {"a": 1, "b": [1, 2]}


def test_load_missing_says_which_notebook_to_run(build_root):
    with pytest.raises(FileNotFoundError, match="run notebooks/42_nothing.ipynb first"):
        results.load("42_nothing")
