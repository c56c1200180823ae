"""env/wheelhouse.py: the wheels reach a registry-less GPU host whole (split, join, manifest, checks),
the host's own CUDA stack is kept, and the stub's venv sees TARGET, the curated host site-packages
and the repository in that order. pip and venv are mocked; the command lines are checked."""
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
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
    ("nvidia-nccl-cu12", True),
    ("torch", True),
    ("torch-c-dlpack-ext", False),
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
             "--requirements", str(reqs), "--constraints", str(lock), "--resolver", "pip", "--no-prometheus"])
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


def run_install(tmp_path, monkeypatch, parts, site, check_rc=0, help_rc=0):
    """install with pip, venv and every command mocked: pip's call writes TARGET/bin/ray, serve, jupyter and
    papermill (the default check commands) as pip would, and each `NAME --help` answers with help_rc."""
    calls = []

    def fake_run(cmd, check=False, capture_output=False, text=False, **kwargs):
        calls.append(cmd)
        if cmd[1:4] == ["-m", "venv", "--without-pip"]:
            (Path(cmd[4]) / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
            (Path(cmd[4]) / "bin").mkdir()
            (Path(cmd[4]) / "bin" / "python").symlink_to("/usr/bin/python3.12")
        if cmd[1:4] == ["-m", "pip", "install"]:
            assert all(Path(w).is_file() for w in cmd[10:])
            (Path(cmd[9]) / "bin").mkdir(parents=True)
            for name in wh.CHECK_COMMANDS:
                (Path(cmd[9]) / "bin" / name).write_text(f"#!/host/python\nimport {name}\n")
        if cmd[-1] == "--help":
            return subprocess.CompletedProcess(cmd, help_rc, "usage: ...\n", "")
        return subprocess.CompletedProcess(cmd, check_rc, "numpy 1.26.4, ray 2.60.0, transformers 5.19.0\n", "boom")

    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    wh.main(["install", "--from", *map(str, reversed(parts)), "--target", str(tmp_path / "target"),
             "--venv", str(tmp_path / "venv"), "--python", "/usr/bin/python3.12", "--pip-python", "/host/python",
             "--host-site-packages", str(site), "--repo", str(tmp_path / "repo")])
    return calls


def test_install_commands_and_pth_order(host, tmp_path, monkeypatch, capsys):
    parts, site = host
    pip, venv, check, *helps = run_install(tmp_path, monkeypatch, parts, site)
    assert pip[:10] == ["/host/python", "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", str(tmp_path / "target")]
    assert sorted(Path(w).name for w in pip[10:]) == sorted(p.name for p in (tmp_path / "wheels").iterdir())
    assert venv == ["/usr/bin/python3.12", "-m", "venv", "--without-pip", str(tmp_path / "venv")]
    assert check[0] == str(tmp_path / "venv" / "bin" / "python") and "import numpy, ray" in check[2]
    pth = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "tutorial.pth"
    assert pth.read_text().splitlines() == [str(tmp_path / "target"), str(tmp_path / "venv" / "host-site-packages"),
                                            str(tmp_path / "repo"), wh.FLASHINFER_PTH_LINE]
    assert sorted(h[0] for h in helps) == sorted(str(tmp_path / "venv" / "bin" / n) for n in wh.CHECK_COMMANDS)
    assert all(h[1:] == ["--help"] for h in helps)
    assert (tmp_path / "venv" / "bin" / "serve").read_text().splitlines()[-1] == \
        f'exec {tmp_path / "venv" / "bin" / "python"} {tmp_path / "target" / "bin" / "serve"} "$@"'
    assert {p.name for p in (tmp_path / "venv" / "host-site-packages").iterdir()} == {"torch"}
    assert f"export PATH={tmp_path / 'venv'}/bin:$PATH" in capsys.readouterr().out


def test_install_fails_when_the_check_fails(host, tmp_path, monkeypatch):
    parts, site = host
    with pytest.raises(SystemExit, match="check failed.*\n.*boom"):
        run_install(tmp_path, monkeypatch, parts, site, check_rc=1)


def test_install_fails_naming_the_commands_that_do_not_start(host, tmp_path, monkeypatch):
    parts, site = host
    with pytest.raises(SystemExit, match=r"4 command\(s\) of .*/venv/bin do not start.*\n\njupyter: exit status 3"):
        run_install(tmp_path, monkeypatch, parts, site, help_rc=3)


def test_install_refuses_a_non_empty_target(host, tmp_path, monkeypatch):
    parts, site = host
    (tmp_path / "target" / "old").mkdir(parents=True)
    with pytest.raises(SystemExit, match="not empty"):
        run_install(tmp_path, monkeypatch, parts, site)


# --- profiles: the .in file's directives, the host's own package list, the check ---------------------------

VLLM_IN = REPO_ROOT / "env" / "requirements-gpu-vllm.in"
plan = wh.plan_module()


def meta_wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    """A wheel whose METADATA lists `requires` (Requires-Dist)."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


def test_vllm_profile_file():
    prof = wh.read_profile(VLLM_IN)
    reqs = prof["requirements"]
    for pin in ("vllm==0.26.0", "nvidia-pytriton==0.7.0", "numpy==1.26.4", "ray[serve]==2.60.0",
                "tritonclient[grpc,http]==2.73.0", "transformers==5.19.0", "openai==3.57.0",
                "kubernetes-validate==1.37.0",  # notebook 08 imports it (its k8s section)
                "pytest==9.2.0"):  # env/gpu_host.sh check runs tests/notebooks on the host
        assert pin in reqs
    assert prof["override"] == ["numpy"] and "vllm" in prof["check-imports"] and prof["glibc"] == ["2.35"]
    assert prof["check-commands"] == ["vllm", "serve", "ray", "jupyter", "papermill"]
    assert {"torch", "torchvision", "torchaudio", "triton", "nvidia-cublas", "nvidia-nccl-cu13"} <= set(prof["host-provides"])
    # vLLM's own CUDA pieces are not the host's: no nvidia-* glob that would drop them
    assert not any(plan.matches(n, prof["host-provides"]) for n in
                   ("nvidia-cutlass-dsl", "nvidia-ml-py", "nvidia-cudnn-frontend", "nvidia-pytriton", "vllm"))
    assert {"tokenspeed-mla", "pynvvideocodec", "nvidia-cutlass-dsl-libs-cu12"} <= set(prof["leave-out"])
    assert wh.read_requirements(VLLM_IN)[0] >= {"vllm", "numpy", "ray", "tritonclient"}


@pytest.fixture
def graph(tmp_path) -> dict[str, Path]:
    d = tmp_path / "graph"
    d.mkdir()
    made = [
        meta_wheel(d, "app", "1.0", "lib>=2", "dep==1.3", 'winonly; sys_platform == "win32"',
                   'old<2; python_version < "3.11"', 'opt>=1; extra == "full"', "numpy>=2", "bigkernel", "torch==2.11.0"),
        meta_wheel(d, "lib", "2.1", "libdep"), meta_wheel(d, "libdep", "1.0"), meta_wheel(d, "dep", "1.3"),
        meta_wheel(d, "winonly", "1.0"), meta_wheel(d, "old", "1.0"), meta_wheel(d, "opt", "1.5", "optdep"),
        meta_wheel(d, "optdep", "1.0"), meta_wheel(d, "numpy", "1.26.4"), meta_wheel(d, "bigkernel", "1.0", "z3-solver"),
        meta_wheel(d, "z3_solver", "4.0"), meta_wheel(d, "Free", "3.0"),
    ]
    return {plan.canonicalize_name(p.name.split("-")[0]): p for p in made}


def run_plan(graph, host, roots=("app[full]==1.0", "free")):
    return plan.plan(graph, {"torch"}, list(roots), "x.in", ["torch"], ["bigkernel"], ["numpy"], host, "3.12")


def test_host_freeze_decides_with_specifiers_markers_and_extras(graph, tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("lib==2.0\ndep==1.2\nold==2.5\nopt==0.9\nnumpy==1.26.4\nFree==0.1\ntorch==2.10.0\n"
                      "libdep==1.0\nwinonly==1.0\n# comment\n-e git+https://x/y#egg=y\n")
    host = plan.read_host_freeze(freeze)
    assert host["free"] == "0.1" and "y" not in host
    got = run_plan(graph, host)
    assert got["lib"] == ("host", "host has lib 2.0")  # lib>=2
    assert got["dep"] == ("carry", "host has dep 1.2, app needs ==1.3")
    assert got["old"][0] == "host"  # `old<2` is for Python < 3.11 only
    assert got["opt"] == ("carry", "host has opt 0.9, app needs >=1")  # asked through app[full]
    assert got["optdep"] == ("carry", "host lacks it")
    assert got["numpy"] == ("carry", "the venv hides the host's copy")  # never the host's, despite numpy>=2
    assert got["free"][0] == "host"  # no specifier: any version fits
    assert got["torch"][0] == "host" and "host has torch 2.10.0, app needs ==2.11.0" in got["torch"][1]
    assert got["bigkernel"] == ("leave-out", "# leave-out")
    assert got["z3-solver"][0] == "pruned"  # only the left-out kernel needs it
    assert got["libdep"][0] == "host" and got["winonly"][0] == "host"


def test_carried_wheels_only_needed_by_host_packages_are_pruned(graph):
    host = {"lib": "2.5"}
    got = run_plan(graph, host)
    assert got["lib"][0] == "host" and got["libdep"][0] == "pruned"  # the host's lib brings its own
    assert got["winonly"][0] == "pruned"  # a Windows-only requirement
    got = run_plan(graph, {"lib": "1.9"})
    assert got["lib"] == ("carry", "host has lib 1.9, app needs >=2") and got["libdep"] == ("carry", "host lacks it")


def test_without_host_freeze_only_host_provides_names_drop(graph):
    got = run_plan(graph, None, roots=("app==1.0", "free"))
    assert got["torch"] == ("host", "# host-provides")
    assert {n for n, (v, _) in got.items() if v == "carry"} == {"app", "lib", "libdep", "dep", "numpy", "free"}
    assert got["opt"][0] == "pruned" and got["optdep"][0] == "pruned"  # the `full` extra is not asked


def test_check_script_per_profile(monkeypatch, capsys):
    import types
    assert wh.CHECK == wh.check_script(None) and "import numpy, ray, tritonclient.grpc" in wh.CHECK
    script = wh.check_script(wh.read_profile(VLLM_IN)["check-imports"])
    assert script.startswith("import numpy, ray, tritonclient.grpc, transformers, papermill, vllm, scripts\n")
    for name, version in [("numpy", "1.26.4"), ("ray", "2.60.0"), ("tritonclient", "2.73.0"), ("tritonclient.grpc", ""),
                          ("transformers", "5.19.0"), ("papermill", "2.7.0"), ("vllm", "0.26.0")]:
        module = types.ModuleType(name)
        module.__version__ = version
        monkeypatch.setitem(sys.modules, name, module)
    exec(script, {})
    assert capsys.readouterr().out.strip() == "numpy 1.26.4, ray 2.60.0, transformers 5.19.0, papermill 2.7.0, vllm 0.26.0"
    sys.modules["numpy"].__version__ = "2.1.0"
    with pytest.raises(AssertionError, match="NumPy 2.1.0"):
        exec(script, {})


def test_install_runs_the_profiles_check(wheels, tmp_path, monkeypatch):
    parts = wh.split(wheels, tmp_path / "out", PART, extra={"profile": "gpu-vllm", "check_imports": ["ray", "vllm"]})
    assert json.loads((parts[0] / "MANIFEST.json").read_text())["check_imports"] == ["ray", "vllm"]
    site = tmp_path / "host-site"
    site.mkdir()
    _, _, check, *_ = run_install(tmp_path, monkeypatch, parts, site)
    assert check[2].startswith("import numpy, ray, vllm\n")


def test_build_profile_with_uv_and_host_freeze(tmp_path, monkeypatch, capsys):
    """Default .in file from --profile, uv resolve (a conflicting lock pin dropped and retried), the
    host-provides and leave-out names not downloaded, the host's list deciding the rest."""
    repo = tmp_path / "repo"
    (repo / "env").mkdir(parents=True)
    (repo / "env" / "requirements-gpu-test.in").write_text(
        "app[full]==1.0\nnumpy==1.26.4\n# override: numpy\n# check-imports: numpy app\n# glibc: 2.35\n"
        "# host-provides: torch nvidia-cublas\n# leave-out: bigkernel -- not needed\n")
    lock = tmp_path / "lock"
    lock.write_text("dep==1.3\nopt==1.4\ntorch==2.13.0+cpu\nnvidia-cublas==12.0\n")
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("lib==2.0\ndep==1.2\nnumpy==2.1.0\ntorch==2.11.0\n")
    source = tmp_path / "graph"
    source.mkdir()
    graph_wheels = {
        "app": meta_wheel(source, "app", "1.0", "lib>=2", "dep==1.3", 'opt>=1; extra == "full"', "numpy>=2", "bigkernel",
                          "torch==2.11.0"),
        "lib": meta_wheel(source, "lib", "2.1"), "dep": meta_wheel(source, "dep", "1.3"), "opt": meta_wheel(source, "opt", "1.5"),
        "numpy": meta_wheel(source, "numpy", "1.26.4"), "bigkernel": meta_wheel(source, "bigkernel", "1.0"),
        "torch": meta_wheel(source, "torch", "2.11.0")}
    calls = []

    def fake_run(cmd, check=False, capture_output=False, text=False):
        calls.append(cmd)
        if cmd[:3] == ["uv", "pip", "compile"]:
            flag = lambda f: Path(cmd[cmd.index(f) + 1])
            assert cmd[cmd.index("--python-platform") + 1] == "x86_64-manylinux_2_35"
            assert flag("--override").read_text() == "numpy==1.26.4\n"
            if "opt==1.4" in flag("-c").read_text():
                return subprocess.CompletedProcess(cmd, 1, "", "Because app[full]==1.0 depends on opt>=1.5 and opt==1.4 ...")
            assert flag("-c").read_text() == "dep==1.3\n"
            flag("-o").write_text("app==1.0\nbigkernel==1.0\ndep==1.3\nlib==2.1\nnumpy==1.26.4\nopt==1.5\ntorch==2.11.0\nnvidia-cublas==13.1\n")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        assert "--no-deps" in cmd and "manylinux_2_39_x86_64" not in cmd
        pins = Path(cmd[cmd.index("-r") + 1]).read_text().split()
        assert not {"torch==2.11.0", "bigkernel==1.0", "nvidia-cublas==13.1"} & set(pins)
        dest = Path(cmd[cmd.index("-d") + 1])
        for pin in pins:
            (dest / graph_wheels[pin.split("==")[0]].name).write_bytes(graph_wheels[pin.split("==")[0]].read_bytes())
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(wh, "REPO", repo)
    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    out = tmp_path / "out"
    (out / "wheels").mkdir(parents=True)
    meta_wheel(out / "wheels", "dep", "1.0")  # a stale file of the download cache: not carried
    wh.main(["build", "--profile", "gpu-test", "--python-version", "3.12", "--out", str(out), "--constraints", str(lock),
             "--host-freeze", str(freeze), "--resolver", "uv", "--no-prometheus"])
    manifest = json.loads((out / "part1" / "MANIFEST.json").read_text())
    assert manifest["profile"] == "gpu-test" and manifest["check_imports"] == ["numpy", "app"]
    assert manifest["check_commands"] == list(wh.CHECK_COMMANDS)
    assert sorted(w["filename"] for w in manifest["wheels"]) == [
        "app-1.0-py3-none-any.whl", "dep-1.3-py3-none-any.whl", "numpy-1.26.4-py3-none-any.whl", "opt-1.5-py3-none-any.whl"]
    printed = capsys.readouterr().out
    assert "lock pin opt==1.4 conflicts" in printed and "dep: carried: host has dep 1.2, app needs ==1.3" in printed
    assert "dropped, the host provides it (3): lib nvidia-cublas torch" in printed and "left out (# leave-out) (1): bigkernel" in printed
    assert "4 wheels, 1 parts" in printed
    assert sum(1 for c in calls if c[:3] == ["uv", "pip", "compile"]) == 2


def test_build_without_host_freeze_says_so(tmp_path, monkeypatch, capsys):
    reqs = tmp_path / "r.in"
    reqs.write_text("app==1.0\n# host-provides: torch\n")
    lock = tmp_path / "lock"
    lock.write_text("")

    def fake_run(cmd, check=False):
        meta_wheel(Path(cmd[cmd.index("-d") + 1]), "app", "1.0", "torch")
        meta_wheel(Path(cmd[cmd.index("-d") + 1]), "torch", "2.11.0", "nvidia-cublas")
        meta_wheel(Path(cmd[cmd.index("-d") + 1]), "nvidia_cublas", "13.0")

    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    wh.main(["build", "--python-version", "3.12", "--out", str(tmp_path / "out"), "--requirements", str(reqs),
             "--constraints", str(lock), "--resolver", "pip", "--no-prometheus"])
    printed = capsys.readouterr().out
    assert "no --host-freeze: only the # host-provides names are dropped" in printed
    assert "needed only by what the host provides or what is left out (1): nvidia-cublas" in printed
    manifest = json.loads((tmp_path / "out" / "part1" / "MANIFEST.json").read_text())
    assert [w["filename"] for w in manifest["wheels"]] == ["app-1.0-py3-none-any.whl"]
    assert manifest["profile"] == "gpu-transformers" and manifest["check_imports"] == list(wh.CHECK_IMPORTS)


# --- commands as a reader types them: VENV/bin wrappers, the FlashInfer switch, the --help check ----------

PROBE = "import sys\nprint(sys.executable, sys.argv[1:])\n"


@pytest.fixture
def fake_install(tmp_path) -> tuple[Path, Path, Path, Path]:
    """TARGET/bin as pip --target leaves it (scripts whose shebang names another interpreter, pip's /bin/sh
    form for a long path, a binary, a name of the venv's own), a venv whose python is this interpreter, a
    repository with [project.scripts], and a host site-packages with one distribution's console script."""
    target, venv, repo, host_site = (tmp_path / n for n in ("target", "venv", "repo", "host-site"))
    (target / "bin").mkdir(parents=True)
    (target / "bin" / "probe").write_text("#!/installing/python3\n" + PROBE)
    (target / "bin" / "longprobe").write_text("#!/bin/sh\n'''exec' \"/a/very/long/installing/python3\" \"$0\" \"$@\"\n' '''\n"
                                              + PROBE)
    (target / "bin" / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 64)
    (target / "bin" / "python3").write_text("#!/installing/python3\nraise SystemExit('not the venv python')\n")
    (target / "bin" / "broken").write_text("#!/installing/python3\nimport no_such_module_here\n")
    (target / "bin" / "usage").write_text("#!/installing/python3\nimport sys\nsys.exit('usage: usage FILE')\n")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "python3").symlink_to("python")
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "__init__.py").write_text("")
    (repo / "tools" / "hello.py").write_text("import sys\n\ndef main():\n    print('hello', sys.argv)\n    return 3\n")
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n[project.scripts]\ntutorial-hello = "tools.hello:main"\n')
    dist = host_site / "hostpkg-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hostpkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[console_scripts]\nhostcmd = tools.hello:main [cli]\nprobe = x:y\n"
                                           "[gui_scripts]\nhostgui = x:z\n")
    return target, venv, repo, host_site


def run_command(path: Path, *args: str, repo: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH stands in for the venv's tutorial.pth line of the repository
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(repo)})


def test_every_console_script_runs_from_the_venv_with_the_venvs_python(fake_install):
    target, venv, repo, host_site = fake_install
    made = wh.link_scripts(target, venv, repo, host_site)
    assert made == {"broken": "python", "longprobe": "python", "probe": "python", "tool": "binary", "usage": "python",
                    "tutorial-hello": "project", "hostcmd": "host"}
    python = venv / "bin" / "python"
    for name in ("probe", "longprobe"):
        done = run_command(venv / "bin" / name, "a b", "c", repo=repo)
        assert done.returncode == 0 and done.stdout.split(" ", 1) == [str(python), "['a b', 'c']\n"], done.stderr
    assert (venv / "bin" / "tool").is_symlink() and (venv / "bin" / "tool").resolve() == target / "bin" / "tool"
    assert (venv / "bin" / "python3").is_symlink()  # the venv's own name is left alone
    done = run_command(venv / "bin" / "tutorial-hello", "--x", repo=repo)
    assert done.returncode == 3 and done.stdout == f"hello [{str(venv / 'bin' / 'tutorial-hello')!r}, '--x']\n"
    assert "from tools.hello import main" in (venv / "bin" / "hostcmd").read_text()  # extras dropped; TARGET's probe wins
    assert "hostgui" not in made
    assert os.access(venv / "bin" / "hostcmd", os.X_OK)
    wh.link_scripts(target, venv, repo, host_site)  # again: the wrappers are replaced, not appended to


def test_a_project_script_that_clashes_is_refused(fake_install):
    target, venv, repo, _ = fake_install
    (repo / "pyproject.toml").write_text('[project.scripts]\nprobe = "tools.hello:main"\n')
    with pytest.raises(SystemExit, match=r"\[project.scripts\] probe: .* has a command of that name"):
        wh.link_scripts(target, venv, repo)


def test_the_project_scripts_are_pyprojects():
    scripts = wh.project_scripts(REPO_ROOT)
    assert scripts["tutorial-run-notebooks"] == "scripts.lab.run_notebooks:main"
    assert all(name.startswith("tutorial-") for name in scripts)


def test_the_check_names_each_command_that_does_not_start(fake_install, monkeypatch):
    target, venv, repo, host_site = fake_install
    made = wh.link_scripts(target, venv, repo, host_site)
    # probe starts, usage stops with a usage error (a start), broken cannot import, absent is not there, and
    # the project's tutorial-hello is checked without being named, its status 3 not a start
    monkeypatch.setenv("PYTHONPATH", str(repo))
    failed = wh.check_scripts(venv, made, ["probe", "usage", "broken", "absent"])
    assert [f.split(":")[0] for f in failed] == ["absent", "broken", "tutorial-hello"]
    assert "ModuleNotFoundError: No module named 'no_such_module_here'" in failed[1]
    assert failed[0] == f"absent: not in {venv / 'bin'} (no installed distribution has this console script)"
    assert failed[2].startswith("tutorial-hello: exit status 3")


@pytest.mark.parametrize("rc, out, started", [
    (0, "usage: vllm [-h]", True),
    (2, "usage: papermill [OPTIONS]\nError: no such option", True),
    (1, "Traceback (most recent call last):\nFileNotFoundError: '--help'", True),  # a script that takes no --help
    (1, "Traceback (most recent call last):\nModuleNotFoundError: No module named 'flashinfer'", False),
    (1, "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm", False),
    (1, "ImportError: /x/_C.so: undefined symbol: cudaGetDriverEntryPointByVersion", False),
    (127, "/bin/sh: 1: /venv/bin/python: not found", False),
    (-11, "", False),
    (None, "", False),
])
def test_what_counts_as_a_start(rc, out, started):
    done = None if rc is None else subprocess.CompletedProcess(["x"], rc, "", out)
    assert (wh.script_failure("x", done) is None) is started


def test_the_venv_sets_the_flashinfer_switch_at_interpreter_start(tmp_path):
    """tutorial.pth's lines as `site` reads them at start: paths first, then the switch from the repository."""
    site_dir, target = tmp_path / "site", tmp_path / "target"
    site_dir.mkdir()
    target.mkdir()
    (site_dir / "tutorial.pth").write_text(wh.pth_text(target, tmp_path / "host", REPO_ROOT))
    code = "import os, site, sys; site.addsitedir(sys.argv[1]); print(os.environ.get('VLLM_USE_FLASHINFER_SAMPLER'))"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_USE_FLASHINFER_SAMPLER"}
    for with_flashinfer, expected in ((False, "0"), (True, "None")):
        if with_flashinfer:
            (target / "flashinfer").mkdir()
            (target / "flashinfer" / "__init__.py").write_text("")
        done = subprocess.run([sys.executable, "-c", code, str(site_dir)], capture_output=True, text=True, timeout=60,
                              env={**env, "PYTHONPATH": str(REPO_ROOT)})
        assert done.stdout.strip() == expected, done.stderr
    done = subprocess.run([sys.executable, "-c", code, str(site_dir)], capture_output=True, text=True, timeout=60,
                          env={**env, "PYTHONPATH": str(REPO_ROOT), "VLLM_USE_FLASHINFER_SAMPLER": "1"})
    assert done.stdout.strip() == "1"


# --- Prometheus for notebook 07, carried as an extra file of the parts ---------------------------------

def fake_prometheus_deb(tmp_path: Path, package: str = "prometheus") -> Path:
    """A .deb laid out as Debian's prometheus package (usr/bin/prometheus and promtool, the copyright and
    NOTICE), with shell scripts for the two programs; built by dpkg-deb as any package is."""
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: {package}\nVersion: 2.42.0+ds-5+deb12u1\nArchitecture: amd64\n"
                                             "Maintainer: x <x@example.org>\nDescription: test\n")
    (root / "usr" / "bin").mkdir(parents=True)
    for name in ("prometheus", "promtool"):
        (root / "usr" / "bin" / name).write_text(f"#!/bin/sh\necho '{name}, version 2.42.0'\n")
        (root / "usr" / "bin" / name).chmod(0o755)
    (root / "usr" / "share" / "doc" / "prometheus").mkdir(parents=True)
    for name in ("copyright", "NOTICE"):
        (root / "usr" / "share" / "doc" / "prometheus" / name).write_text(name)
    deb = tmp_path / f"{package}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True, capture_output=True)
    return deb


needs_dpkg = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb (Debian's dpkg) is not installed")


@needs_dpkg
def test_prometheus_archive_holds_the_packages_two_programs(tmp_path):
    archive, keys = wh.prometheus_archive(tmp_path / "extras", fake_prometheus_deb(tmp_path))
    assert archive.name == "prometheus-2.42.0+ds-5+deb12u1.tar.gz"
    assert keys == {"unpack": "venv", "commands": ["prometheus", "promtool"],
                    "source": "Debian package prometheus 2.42.0+ds-5+deb12u1 (amd64): usr/bin/prometheus, usr/bin/promtool"}
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["bin/prometheus", "bin/promtool", "share/doc/prometheus/NOTICE",
                               "share/doc/prometheus/copyright"]
    assert members["bin/prometheus"].mode == 0o755 and members["bin/prometheus"].uid == 0
    with pytest.raises(SystemExit, match="is prometheus-node-exporter for amd64"):
        wh.prometheus_archive(tmp_path / "extras", fake_prometheus_deb(tmp_path / "other", "prometheus-node-exporter"))


def test_prometheus_archive_says_what_to_do_when_apt_cannot_download(tmp_path, monkeypatch):
    monkeypatch.setattr(wh.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 100, "", "E: no list"))
    with pytest.raises(SystemExit, match=r"apt-get download prometheus` failed \(E: no list\).*--prometheus-deb FILE.*--no-prometheus"):
        wh.prometheus_archive(tmp_path)


def test_an_extra_file_travels_in_the_parts_with_its_sha256_and_chunks(wheels, tmp_path):
    extra = fake_wheel(tmp_path, "prometheus-1.tar.gz", 50_000)  # bigger than a part: chunks, as a big wheel
    parts = wh.split(wheels, tmp_path / "out", PART, files={extra: {"unpack": "venv", "commands": ["prometheus"]}})
    assert all(sum(f.stat().st_size for f in p.iterdir()) <= PART for p in parts)
    manifest = json.loads((parts[0] / "MANIFEST.json").read_text())
    (entry,) = manifest["files"]
    assert entry["filename"] == extra.name and entry["sha256"] == wh.sha256(extra) and entry["size"] == extra.stat().st_size
    assert len(entry["chunks"]) >= 2 and entry["unpack"] == "venv" and entry["commands"] == ["prometheus"]
    assert extra.name not in {w["filename"] for w in manifest["wheels"]}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert [p.read_bytes() for p in wh.assemble(parts, scratch, "files")] == [extra.read_bytes()]
    assert len(wh.assemble(parts, scratch)) == 7  # the wheels alone
    chunk_part = entry["chunks"][-1]["part"]
    with pytest.raises(SystemExit, match=f"missing parts: part{chunk_part} "):
        wh.assemble([p for p in parts if p.name != f"part{chunk_part}"], scratch)  # named even for the wheels


@needs_dpkg
def test_install_unpacks_prometheus_into_the_venv_and_runs_it(wheels, tmp_path, monkeypatch, capsys):
    archive, keys = wh.prometheus_archive(tmp_path / "extras", fake_prometheus_deb(tmp_path))
    parts = wh.split(wheels, tmp_path / "out", PART, files={archive: keys})
    site = tmp_path / "host-site"
    site.mkdir()
    calls = run_install(tmp_path, monkeypatch, parts, site)
    venv_bin = tmp_path / "venv" / "bin"
    assert (venv_bin / "prometheus").read_text() == "#!/bin/sh\necho 'prometheus, version 2.42.0'\n"
    assert os.access(venv_bin / "promtool", os.X_OK)
    assert (tmp_path / "venv" / "share" / "doc" / "prometheus" / "NOTICE").is_file()
    assert [str(venv_bin / "prometheus"), "--help"] in calls and [str(venv_bin / "promtool"), "--help"] in calls
    assert not any(Path(a).name.endswith(".tar.gz") for c in calls for a in c)  # not handed to pip
    assert "prometheus-2.42.0+ds-5+deb12u1.tar.gz unpacked into" in capsys.readouterr().out


def test_unpack_refuses_a_member_outside_the_folder(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("../evil")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(SystemExit, match="refusing member '../evil'"):
        wh.unpack_into(bad, tmp_path / "root")


def test_build_carries_prometheus_unless_told_not_to(tmp_path, monkeypatch, capsys):
    reqs = tmp_path / "r.in"
    reqs.write_text("app==1.0\n")
    lock = tmp_path / "lock"
    lock.write_text("")
    archive = fake_wheel(tmp_path, "prometheus-2.42.0.tar.gz", 1000)
    asked = []

    def fake_archive(dest, deb=None):
        asked.append((dest, deb))
        return archive, {"unpack": "venv", "commands": ["prometheus", "promtool"], "source": "Debian package prometheus 2.42.0"}

    monkeypatch.setattr(wh, "prometheus_archive", fake_archive)
    monkeypatch.setattr(wh.subprocess, "run", lambda cmd, check=False: meta_wheel(Path(cmd[cmd.index("-d") + 1]), "app", "1.0"))
    base = ["build", "--python-version", "3.12", "--requirements", str(reqs), "--constraints", str(lock), "--resolver", "pip"]
    wh.main([*base, "--out", str(tmp_path / "out"), "--prometheus-deb", str(tmp_path / "p.deb")])
    assert asked == [(tmp_path / "out" / "extras", tmp_path / "p.deb")]
    manifest = json.loads((tmp_path / "out" / "part1" / "MANIFEST.json").read_text())
    assert [f["filename"] for f in manifest["files"]] == [archive.name] and manifest["files"][0]["commands"] == ["prometheus", "promtool"]
    assert "1 wheels + prometheus-2.42.0.tar.gz, 1 parts" in capsys.readouterr().out
    wh.main([*base, "--out", str(tmp_path / "bare"), "--no-prometheus"])
    assert len(asked) == 1 and "files" not in json.loads((tmp_path / "bare" / "part1" / "MANIFEST.json").read_text())
