"""A profile's contract: the GPU-free part of its path, run here under the package versions of the
machine it is for (``env/contract/<profile>.txt``: pins, and ``# test:`` lines naming the tests).

    python -m scripts.lab.contract gpu-trtllm        # make test-contract

The pins go into ``build/contract/<profile>/site`` with ``pip install --no-deps --target`` (only
those packages; the rest is this venv's), which then comes first on ``PYTHONPATH`` of a pytest run
over the named tests, with ``TUTORIAL_CONTRACT=<profile>`` set. The run fails, before any test, if
an import would not find the pinned versions.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from scripts.paths import REPO_ROOT, build_dir

CONTRACT_DIR = REPO_ROOT / "env" / "contract"
CONTRACT_ENV = "TUTORIAL_CONTRACT"
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)$")


@dataclass(frozen=True)
class Contract:
    profile: str
    pins: dict[str, str]   # distribution name -> version
    tests: tuple[str, ...]  # paths relative to the repository root

    @property
    def site(self) -> Path:
        return build_dir() / "contract" / self.profile / "site"


def read_contract(profile: str, directory: Path = CONTRACT_DIR) -> Contract:
    """The pins and tests of ``env/contract/<profile>.txt``; a clear error for a line it cannot read."""
    path = directory / f"{profile}.txt"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.txt"))
        raise FileNotFoundError(f"no contract for profile {profile!r} ({path}); contracts: {known}")
    pins: dict[str, str] = {}
    tests: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if raw.strip().startswith("# test:"):
            test = raw.split(":", 1)[1].strip()
            if not (REPO_ROOT / test).exists():
                raise ValueError(f"{path}:{number}: the test {test!r} does not exist")
            tests.append(test)
        elif line:
            match = _PIN.match(line)
            if not match:
                raise ValueError(f"{path}:{number}: {raw.strip()!r} is not a pin (name==version)")
            pins[match.group(1)] = match.group(2)
    if not pins or not tests:
        raise ValueError(f"{path} names no pin or no test (lines '# test: PATH')")
    return Contract(profile, pins, tuple(tests))


def installed(site: Path) -> dict[str, str]:
    """``{distribution name: version}`` of what ``site`` holds (its ``*.dist-info``)."""
    return {dist.metadata["Name"]: dist.version for dist in metadata.distributions(path=[str(site)])}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_pins(contract: Contract) -> dict[str, str]:
    """The pins ``contract.site`` does not hold at their version."""
    have = {_canonical(k): v for k, v in installed(contract.site).items()} if contract.site.is_dir() else {}
    return {name: version for name, version in contract.pins.items() if have.get(_canonical(name)) != version}


def install(contract: Contract) -> None:
    """Put the pins into ``contract.site`` (anew when any is missing or at another version)."""
    if not missing_pins(contract):
        return
    shutil.rmtree(contract.site, ignore_errors=True)
    contract.site.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(contract.site),
                    *(f"{name}=={version}" for name, version in contract.pins.items())], check=True)
    if left := missing_pins(contract):
        raise RuntimeError(f"pip did not install {left} into {contract.site}")


def environment(contract: Contract, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(contract.site), env.get("PYTHONPATH", "")) if p)
    env[CONTRACT_ENV] = contract.profile
    return env


def in_effect(contract: Contract) -> dict[str, str]:
    """The versions a fresh interpreter with the contract's environment imports: ``{name: version}``
    for each pin (what the tests will run under)."""
    names = ", ".join(repr(n) for n in contract.pins)
    code = f"import json; from importlib import metadata; print(json.dumps({{n: metadata.version(n) for n in ({names},)}}))"
    out = subprocess.run([sys.executable, "-c", code], env=environment(contract), capture_output=True, text=True,
                         check=True, cwd=REPO_ROOT).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a profile with env/contract/<profile>.txt (gpu-trtllm)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments")
    args = parser.parse_args(argv)
    contract = read_contract(args.profile)
    install(contract)
    versions = in_effect(contract)
    if versions != contract.pins:
        print(f"contract {contract.profile}: the tests would import {versions}, not {contract.pins}", file=sys.stderr)
        return 2
    print(f"contract {contract.profile}: {', '.join(f'{n} {v}' for n, v in versions.items())} over this venv; "
          f"{len(contract.tests)} test paths", flush=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *contract.tests,
                           *args.pytest_args], env=environment(contract), cwd=REPO_ROOT).returncode


if __name__ == "__main__":
    raise SystemExit(main())
