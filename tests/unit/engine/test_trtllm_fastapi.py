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


def test_the_gpu_requirements_pin_the_protobuf_that_tritonclients_generated_code_needs(monkeypatch):
    # tritonclient 2.73's model_config_pb2 refuses an older protobuf runtime: pinned over the image's, and
    # imported with TensorRT-LLM's modules by the preflight; the pins are the cpu lock's
    from scripts.paths import REPO_ROOT

    gpu = dict(line.split("==") for line in (REPO_ROOT / "env/requirements-gpu.txt").read_text().splitlines()
               if "==" in line and not line.startswith("#"))
    cpu = dict(line.split("==") for line in (REPO_ROOT / "env/requirements-cpu.lock").read_text().splitlines()
               if "==" in line and not line.startswith("#"))
    for name in ("protobuf", "grpcio", "grpcio-reflection"):
        assert gpu[name] == cpu[name], name
    assert not trtllm_fastapi.loads(list(trtllm_fastapi.PROTOBUF_MODULES))  # and it imports here
    seen = []
    monkeypatch.setattr(trtllm_fastapi, "loads", lambda modules, **_: seen.extend(modules) or False)
    assert trtllm_fastapi.main() == 0
    assert set(trtllm_fastapi.PROTOBUF_MODULES) <= set(seen)
