"""env/pick_python.sh: setup_env.sh takes TUTORIAL_PYTHON, else the first system CPython (3.11, 3.12,
3.13) that has libpython3.X.so.1.0 and can make venvs, else fails naming the apt command for the
distribution's python3. The candidates are fake interpreters that answer setup_env's queries."""
import subprocess
from pathlib import Path

import pytest

from scripts.paths import REPO_ROOT

PICK = REPO_ROOT / "env" / "pick_python.sh"


def fake_python(folder: Path, version: str, libpython: bool = True, venv: bool = True) -> Path:
    """A script answering the version, LIBDIR and `import venv, ensurepip` queries like CPython would."""
    libdir = folder / f"lib{version}"
    libdir.mkdir(parents=True)
    if libpython:
        (libdir / f"libpython{version}.so.1.0").touch()
    py = folder / f"python{version}"
    py.write_text(f"""#!/bin/sh
case "$2" in
  *version_info*) echo {version} ;;
  *LIBDIR*) echo {libdir} ;;
  *ensurepip*) exit {0 if venv else 1} ;;
  *) exit 2 ;;
esac
""")
    py.chmod(0o755)
    return py


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A PATH whose ldconfig knows no libpython, so only the fake LIBDIRs count."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ldconfig").write_text("#!/bin/sh\necho 'libc.so.6 (libc6,x86-64) => /lib/libc.so.6'\n")
    (bin_dir / "ldconfig").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "PY_SYSTEM": str(fake_python(tmp_path / "system", "3.13"))}


def pick(env: dict[str, str], candidates: list[Path | str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -euo pipefail; source {PICK}; pick_python"],
                          env={**env, "PY_CANDIDATES": " ".join(map(str, candidates)), **extra},
                          capture_output=True, text=True)


def test_first_usable_candidate_wins(tmp_path, env):
    no_venv = fake_python(tmp_path / "a", "3.11", venv=False)
    no_lib = fake_python(tmp_path / "b", "3.11", libpython=False)
    good12, good13 = fake_python(tmp_path / "c", "3.12"), fake_python(tmp_path / "d", "3.13")
    out = pick(env, [tmp_path / "missing" / "python3.11", no_venv, no_lib, good12, good13])
    assert out.returncode == 0 and out.stdout.strip() == str(good12), out.stderr


def test_none_usable_names_the_apt_command_for_the_system_python(tmp_path, env):
    out = pick(env, [tmp_path / "missing" / "python3.11", fake_python(tmp_path / "b", "3.12", libpython=False)])
    assert out.returncode == 1 and out.stdout == ""
    assert "sudo apt-get install python3.13-venv libpython3.13" in out.stderr
    assert "libpython3.12.so.1.0 not found" in out.stderr and "python3.11 not found" in out.stderr


def test_tutorial_python_is_taken_as_given(tmp_path, env):
    good = fake_python(tmp_path / "a", "3.12")
    out = pick(env, [fake_python(tmp_path / "b", "3.11")], TUTORIAL_PYTHON=str(good))
    assert out.returncode == 0 and out.stdout.strip() == str(good)


@pytest.mark.parametrize("broken, message", [
    ({"venv": False}, "cannot make venvs: sudo apt-get install python3.12-venv"),
    ({"libpython": False}, "libpython3.12.so.1.0 not found: the Triton Python-backend stub needs it. "
                           "Install it: sudo apt-get install libpython3.12"),
])
def test_tutorial_python_keeps_its_checks(tmp_path, env, broken, message):
    out = pick(env, [fake_python(tmp_path / "b", "3.11")], TUTORIAL_PYTHON=str(fake_python(tmp_path / "a", "3.12", **broken)))
    assert out.returncode == 1 and message in out.stderr and out.stdout == ""


def test_missing_tutorial_python_says_what_to_install(tmp_path, env):
    out = pick(env, [], TUTORIAL_PYTHON=str(tmp_path / "python3.12"))
    assert out.returncode == 1
    assert "sudo apt-get install python3.12 python3.12-venv libpython3.12 (or set TUTORIAL_PYTHON)" in out.stderr


def test_setup_env_sources_the_picker_and_notes_the_lock_version():
    text = (REPO_ROOT / "env" / "setup_env.sh").read_text()
    assert 'source "$repo/env/pick_python.sh"' in text and "py=$(pick_python) || exit 1" in text
    assert "env/requirements-cpu.lock is resolved for Python 3.11; on $ver pip installs the same pins" in text
    assert 'stamp=$(cat "$lock" "$0" "$repo/pyproject.toml" | sha256sum | cut -c1-16)' in text


def test_real_system_python_when_present():
    out = subprocess.run(["bash", "-c", f"set -euo pipefail; source {PICK}; pick_python"], capture_output=True, text=True)
    assert out.returncode == 0 or "sudo apt-get install" in out.stderr
    if out.returncode == 0:
        assert Path(out.stdout.strip()).name.startswith("python3.1")
