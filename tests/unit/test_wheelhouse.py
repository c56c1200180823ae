"""env/wheelhouse.py: the wheels reach a registry-less GPU host whole (split, join, manifest, checks),
the host's own CUDA stack is kept, and the stub's venv sees TARGET, the curated host site-packages
and the repository in that order. pip and venv are mocked; the command lines are checked."""
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.paths import REPO_ROOT

spec = importlib.util.spec_from_file_location("wheelhouse", REPO_ROOT / "env" / "wheelhouse.py")
wh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wh)

IN_FILE = REPO_ROOT / "env" / "requirements-gpu-transformers.in"
PART = 30_000


def fake_wheel(folder: Path, name: str, payload: int) -> Path:
    """A real zip file of about `payload` bytes (stored, random, so its size is predictable)."""
    path = folder / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("data.bin", os.urandom(payload))
    return path


@pytest.fixture
def wheels(tmp_path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    fake_wheel(d, "big-1.0-py3-none-any.whl", 70_000)  # bigger than a 30 kB part: chunks
    for i, size in enumerate((20_000, 15_000, 9000, 6000, 3000, 1000)):
        fake_wheel(d, f"pkg{i}-1.0-py3-none-any.whl", size)
    return d


def test_requirements_file_pins_and_host_provides():
    required, provided = wh.read_requirements(IN_FILE)
    assert {"nvidia-pytriton", "numpy", "ray", "tritonclient", "transformers", "tritonserver"} <= required
    assert {"torch", "nvidia-*", "hf-xet", "pyyaml", "charset-normalizer", "pygments"} <= set(provided)
    assert 'tritonserver==2.73.0; python_version == "3.12"' in IN_FILE.read_text()


@pytest.mark.parametrize("wheel, dropped", [
    ("torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", True),
    ("nvidia_cublas_cu12-12.8.4.1-py3-none-manylinux_2_27_x86_64.whl", True),
    ("hf_xet-1.2.0-cp37-abi3-manylinux_2_17_x86_64.whl", True),
    ("PyYAML-6.0.3-cp312-cp312-manylinux_2_17_x86_64.whl", True),
    ("transformers-5.19.0-py3-none-any.whl", False),
    ("torchx-0.1-py3-none-any.whl", False),
])
def test_host_provides_names_and_trailing_glob(wheel, dropped):
    assert wh.host_provides(wheel, ["torch", "nvidia-*", "hf-xet", "pyyaml"]) is dropped


def test_constraints_are_the_lock_pins_without_torch_and_vllm():
    lines = wh.filter_constraints(REPO_ROOT / "env" / "requirements-cpu.lock")
    assert lines and all("==" in line for line in lines)
    assert not any(line.startswith("torch==") or "vllm" in line for line in lines)
    assert "transformers==5.19.0" in lines and "numpy==1.26.4" in lines


@pytest.mark.parametrize("version, kept", [("3.12", True), ("3.11", False), ("3.13", False)])
def test_python_version_markers_decided_for_the_host(version, kept):
    text = 'numpy==1.26.4\ntritonserver==2.73.0; python_version == "3.12"\nfoo==1; python_version >= "3.12"  # new\n'
    lines = wh.apply_python_markers(text, version).splitlines()
    assert lines[0] == "numpy==1.26.4"
    assert ("tritonserver==2.73.0" in lines) is kept and ("foo==1" in lines) is (version != "3.11")


def test_download_command():
    cmd = wh.download_command("3.12", Path("/o/wheels"), Path("r.in"), Path("c.txt"))
    platforms = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert cmd[:9] == [sys.executable, "-m", "pip", "download", "--only-binary=:all:",
                       "--python-version", "3.12", "--implementation", "cp"]
    assert platforms == [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39)] + [
        "manylinux2014_x86_64", "manylinux1_x86_64", "any"]
    assert cmd[-6:] == ["-d", "/o/wheels", "-r", "r.in", "-c", "c.txt"]


def test_build_drops_host_wheels_but_keeps_requirements(tmp_path, monkeypatch, capsys):
    reqs = tmp_path / "r.in"
    reqs.write_text("nvidia-pytriton==0.7.0\nray[serve]==2.60.0  # serving\n# host-provides: torch nvidia-*\n"
                    'tritonserver==2.73.0; python_version == "3.12"\n')
    lock = tmp_path / "lock"
    lock.write_text("# header\nray==2.60.0\ntorch==2.13.0+cpu\nvllm-cpu==0.32.0\nfoo>=1\n")
    calls = []

    def fake_run(cmd, check):
        calls.append((Path(cmd[cmd.index("-r") + 1]).read_text(), Path(cmd[-1]).read_text()))
        dest = Path(cmd[cmd.index("-d") + 1])
        for name in ("nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl", "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl",
                     "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", "nvidia_nccl_cu12-2.27-py3-none-manylinux_2_18_x86_64.whl"):
            fake_wheel(dest, name, 100)

    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    wh.main(["build", "--python-version", "3.12", "--out", str(tmp_path / "out"),
             "--requirements", str(reqs), "--constraints", str(lock)])
    (requirements, constraints), = calls
    assert constraints == "ray==2.60.0\n" and requirements.splitlines()[-1] == "tritonserver==2.73.0"
    manifest = json.loads((tmp_path / "out" / "part1" / "MANIFEST.json").read_text())
    assert [w["filename"].split("-")[0] for w in manifest["wheels"]] == ["nvidia_pytriton", "ray"]
    assert "part1" in capsys.readouterr().out


def test_split_layout(wheels, tmp_path):
    out = tmp_path / "out"
    parts = wh.split(wheels, out, PART)
    assert [p.name for p in parts] == [f"part{n}" for n in range(1, len(parts) + 1)]
    assert all(sum(f.stat().st_size for f in p.iterdir()) <= PART for p in parts)
    manifest = json.loads((out / "part1" / "MANIFEST.json").read_text())
    assert manifest["parts"] == len(parts) and len(manifest["wheels"]) == 7
    big = next(w for w in manifest["wheels"] if w["filename"].startswith("big"))
    n = len(big["chunks"])
    assert big["part"] is None and n >= 3 and [c["name"] for c in big["chunks"]] == [
        f"big-1.0-py3-none-any.whl.chunk{i:03d}" for i in range(n)]
    chunk_parts = [c["part"] for c in big["chunks"]]
    assert chunk_parts == list(range(chunk_parts[0], chunk_parts[0] + n))  # consecutive
    assert sum(c["size"] for c in big["chunks"]) == big["size"]
    small = next(w for w in manifest["wheels"] if w["filename"].startswith("pkg0"))
    assert small["chunks"] == [] and (out / f"part{small['part']}" / small["filename"]).is_file()
    assert small["sha256"] == wh.sha256(wheels / small["filename"])


def test_assemble_joins_chunks_from_parts_in_any_order(wheels, tmp_path):
    parts = wh.split(wheels, tmp_path / "out", PART)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    got = wh.assemble(list(reversed(parts)), scratch)
    assert sorted(p.name for p in got) == sorted(p.name for p in wheels.iterdir())
    for p in got:
        assert p.read_bytes() == (wheels / p.name).read_bytes()
        zipfile.ZipFile(p).testzip()


def test_assemble_names_missing_parts(wheels, tmp_path):
    parts = wh.split(wheels, tmp_path / "out", PART)
    with pytest.raises(SystemExit, match=r"missing parts: part2 \(.*\)") as e:
        wh.assemble([parts[0], *parts[2:]], tmp_path)
    assert "part1" not in str(e.value)
    with pytest.raises(SystemExit, match="MANIFEST.json not found"):
        wh.assemble(parts[1:], tmp_path)


def test_assemble_rejects_sha_mismatch(wheels, tmp_path):
    parts = wh.split(wheels, tmp_path / "out", PART)
    manifest = json.loads((parts[0] / "MANIFEST.json").read_text())
    victim = next(w for w in manifest["wheels"] if not w["chunks"])
    path = tmp_path / "out" / f"part{victim['part']}" / victim["filename"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SystemExit, match=f"{victim['filename']}: size or sha256 differs"):
        wh.assemble(parts, tmp_path)


def test_curated_host_site_hides_numpy_scipy_sklearn(tmp_path):
    host = tmp_path / "host"
    kept = ["torch", "torch-2.9.0.dist-info", "distutils-precedence.pth", "six.py"]
    hidden = ["numpy", "numpy-2.1.0.dist-info", "numpy.libs", "scipy", "scipy.libs", "sklearn",
              "scikit_learn-1.5.0.dist-info", "NumPy_Extra"]
    for name in kept + hidden:
        (host / name).mkdir(parents=True) if "." not in name or "dist-info" in name else (host / name).touch()
    dest = tmp_path / "venv" / "host-site-packages"
    wh.curate_host_site(host, dest)
    names = {p.name for p in dest.iterdir()}
    assert names == {"torch", "torch-2.9.0.dist-info", "distutils-precedence.pth", "six.py"}
    assert all((dest / n).is_symlink() and (dest / n).resolve() == host / n for n in names)
    wh.curate_host_site(host, dest)  # idempotent
    assert {p.name for p in dest.iterdir()} == names


@pytest.fixture
def host(wheels, tmp_path):
    """Part folders and a fake host site-packages."""
    parts = wh.split(wheels, tmp_path / "out", PART)
    site = tmp_path / "host-site"
    (site / "torch").mkdir(parents=True)
    (site / "scipy").mkdir()
    return parts, site


def run_install(tmp_path, monkeypatch, parts, site, check_rc=0):
    calls = []

    def fake_run(cmd, check=False, capture_output=False, text=False):
        calls.append(cmd)
        if cmd[1:4] == ["-m", "venv", "--without-pip"]:
            (Path(cmd[4]) / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
        if cmd[1:4] == ["-m", "pip", "install"]:
            assert all(Path(w).is_file() for w in cmd[10:])
        return subprocess.CompletedProcess(cmd, check_rc, "numpy 1.26.4, ray 2.60.0, transformers 5.19.0\n", "boom")

    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    wh.main(["install", "--from", *map(str, reversed(parts)), "--target", str(tmp_path / "target"),
             "--venv", str(tmp_path / "venv"), "--python", "/usr/bin/python3.12", "--pip-python", "/host/python",
             "--host-site-packages", str(site), "--repo", str(tmp_path / "repo")])
    return calls


def test_install_commands_and_pth_order(host, tmp_path, monkeypatch, capsys):
    parts, site = host
    pip, venv, check = run_install(tmp_path, monkeypatch, parts, site)
    assert pip[:10] == ["/host/python", "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", str(tmp_path / "target")]
    assert sorted(Path(w).name for w in pip[10:]) == sorted(p.name for p in (tmp_path / "wheels").iterdir())
    assert venv == ["/usr/bin/python3.12", "-m", "venv", "--without-pip", str(tmp_path / "venv")]
    assert check[0] == str(tmp_path / "venv" / "bin" / "python") and "import numpy, ray" in check[2]
    pth = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "tutorial.pth"
    assert pth.read_text().splitlines() == [str(tmp_path / "target"), str(tmp_path / "venv" / "host-site-packages"),
                                            str(tmp_path / "repo")]
    assert {p.name for p in (tmp_path / "venv" / "host-site-packages").iterdir()} == {"torch"}
    assert f"export PATH={tmp_path / 'venv'}/bin:$PATH" in capsys.readouterr().out


def test_install_fails_when_the_check_fails(host, tmp_path, monkeypatch):
    parts, site = host
    with pytest.raises(SystemExit, match="check failed.*\n.*boom"):
        run_install(tmp_path, monkeypatch, parts, site, check_rc=1)


def test_install_refuses_a_non_empty_target(host, tmp_path, monkeypatch):
    parts, site = host
    (tmp_path / "target" / "old").mkdir(parents=True)
    with pytest.raises(SystemExit, match="not empty"):
        run_install(tmp_path, monkeypatch, parts, site)
