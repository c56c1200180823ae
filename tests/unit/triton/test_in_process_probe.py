"""The in-process probe: it finds the wheel's Triton library and reports the first failing step."""
from __future__ import annotations

import pytest

from scripts.triton import in_process_probe as probe


def test_library_dirs_link_the_wheels_library_under_the_name_the_bindings_need(build_root, tmp_path, monkeypatch):
    libs = tmp_path / "site" / "nvidia_pytriton.libs"
    libs.mkdir(parents=True)
    (libs / "libtritonserver-abc123.so").write_bytes(b"")
    monkeypatch.setattr(probe.envcheck, "pytriton_root", lambda: tmp_path / "site" / "pytriton" / "tritonserver")
    link_dir, lib_dir = probe.library_dirs()
    assert (link_dir / "libtritonserver.so").resolve() == (libs / "libtritonserver-abc123.so").resolve()
    assert lib_dir == libs


def test_library_dirs_say_what_to_install(build_root, tmp_path, monkeypatch):
    monkeypatch.setattr(probe.envcheck, "pytriton_root", lambda: tmp_path / "nothing" / "pytriton")
    with pytest.raises(FileNotFoundError, match="pip install nvidia-pytriton"):
        probe.library_dirs()


def test_child_reports_the_step_that_failed(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tritonserver", None)  # import fails as without the library
    result = probe.child("/nowhere", "ensemble", "hi")
    assert result["ok"] is False and result["step"] == "import tritonserver" and "tritonserver" in result["error"]
