"""The FastAPI check: a module set that imports fastapi is caught, one that does not passes."""

import pytest

from scripts.engine import trtllm_fastapi


@pytest.fixture
def packages(tmp_path, monkeypatch):
    (tmp_path / "serverish").mkdir()
    (tmp_path / "serverish" / "__init__.py").write_text("import fastapi\n")
    (tmp_path / "runtimeish").mkdir()
    (tmp_path / "runtimeish" / "__init__.py").write_text("import json\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_a_module_that_imports_fastapi_is_caught(packages):
    assert trtllm_fastapi.loads(["runtimeish", "serverish"]) is True
    assert trtllm_fastapi.loads(["runtimeish"]) is False


def test_a_module_that_does_not_import_is_an_error_that_shows_why(packages):
    with pytest.raises(RuntimeError, match="No module named 'missing_pkg'"):
        trtllm_fastapi.loads(["missing_pkg"])


def test_requirement_reads_a_distributions_metadata():
    assert trtllm_fastapi.requirement("ray", "fastapi").startswith("fastapi")
    assert trtllm_fastapi.requirement("no-such-distribution", "fastapi") is None


def test_main_fails_when_the_tutorials_modules_load_fastapi(monkeypatch, capsys):
    monkeypatch.setattr(trtllm_fastapi, "loads", lambda modules, **_: True)
    assert trtllm_fastapi.main() == 1 and "loads fastapi" in capsys.readouterr().err
    monkeypatch.setattr(trtllm_fastapi, "loads", lambda modules, **_: False)
    assert trtllm_fastapi.main() == 0
