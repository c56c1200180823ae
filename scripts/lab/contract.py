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
    notebooks: tuple[tuple[str, str], ...] = ()  # (notebook, the error text of its first cell needing the
                                                 # machine; "" for a notebook that runs to its end)

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
    notebooks: list[tuple[str, str]] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if raw.strip().startswith("# notebook:"):
            name, _, boundary = raw.split(":", 1)[1].partition("|")
            name, boundary = name.strip(), boundary.strip()
            if not (REPO_ROOT / "notebooks" / f"{name}.ipynb").is_file():
                raise ValueError(f"{path}:{number}: '# notebook: NAME [| ERROR TEXT]' names no notebook")
            notebooks.append((name, boundary))
        elif raw.strip().startswith("# test:"):
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
    return Contract(profile, pins, tuple(tests), tuple(notebooks))


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
    # the pins first, then this checkout's scripts/ (a notebook's kernel would find the venv's editable install)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(contract.site), str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
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


@dataclass(frozen=True)
class NotebookRun:
    notebook: str
    cells_run: int
    stopped_at: int | None   # the index of the cell that raised, None when every cell ran
    error: str               # its ename: evalue, "" when none
    printed: str = ""        # the text the cells that ran printed

    def holds(self, boundary: str) -> bool:
        """Every cell ran up to the one needing the machine, which failed saying ``boundary``'s first
        part (``ERROR | PRINTED | ...``: and the cells that ran printed each further part, e.g. a
        subprocess's own error); with no boundary (""), every cell ran."""
        if not boundary:
            return self.stopped_at is None and self.cells_run > 0
        error, *printed = (part.strip() for part in boundary.split("|"))
        return self.stopped_at is not None and error in self.error and all(p in self.printed for p in printed)


def notebook_run(executed: Path) -> NotebookRun:
    """What an executed copy (papermill's) shows: the cells run, and the first error."""
    nb = json.loads(executed.read_text())
    code = [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    printed = []
    for i, cell in code:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                ran = sum(1 for j, c in code if j <= i and c.get("execution_count") is not None)
                return NotebookRun(executed.stem, ran, i, f"{out.get('ename')}: {out.get('evalue')}", "".join(printed))
            printed.append("".join(out.get("text", "")))
    return NotebookRun(executed.stem, sum(1 for _, c in code if c.get("execution_count") is not None), None, "",
                       "".join(printed))


def stage_gpu_outputs(profile_name: str) -> list[Path]:
    """What the GPU steps of notebook 01 leave behind, for the notebooks after it: the engine config
    this repository writes (``engine_config.json``, no GPU needed) and, for TensorRT-LLM, the
    ``build_config`` part of the ``config.json`` that ``trtllm-build`` writes beside the engine (the
    fields this repository reads). The engine itself is not made: no notebook after 01 needs it before
    its own first GPU cell."""
    from scripts.engine.config import engine_settings, write_engine_config  # noqa: PLC0415
    from scripts.profiles import load_profile  # noqa: PLC0415

    profile = load_profile(profile_name)
    written = [write_engine_config(profile)]
    if profile.engine == "tensorrt_llm":
        settings = engine_settings(profile)
        build = {key: settings[key] for key in ("max_batch_size", "max_input_len", "max_seq_len")}
        written.append(written[0].parent / "config.json")
        written[-1].write_text(json.dumps({"build_config": build}, indent=2) + "\n")
    return written


def execute_notebooks(contract: Contract) -> list[tuple[NotebookRun, str]]:
    """Each notebook of the contract under its versions and ``PROFILE=<profile>``, in order, in a build
    directory of its own, with a stand-in checkpoint written by the pinned transformers as
    ``$LLAMA_MODEL_DIR``; each paired with the boundary it must reach."""
    root = contract.site.parent
    env = environment(contract) | {"TUTORIAL_BUILD_DIR": str(root / "build"), "LLAMA_MODEL_DIR": str(root / "checkpoint")}
    shutil.rmtree(root / "build", ignore_errors=True)
    if not (root / "checkpoint" / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "scripts.model.tiny_llama", str(root / "checkpoint"), "--train-steps", "20"],
                       env=env, cwd=REPO_ROOT, check=True, capture_output=True)
    runs = []
    for name, boundary in contract.notebooks:
        out = root / "executed"
        subprocess.run([sys.executable, "-m", "scripts.lab.run_notebooks", "--profile", contract.profile, "--only",
                        name[:2], "--out", str(out)], env=env, cwd=REPO_ROOT, capture_output=True)
        run = notebook_run(out / f"{name}.ipynb")
        if name.startswith("01"):  # the build is the boundary: stage what it leaves, in the contract's build dir
            subprocess.run([sys.executable, "-c", f"from scripts.lab.contract import stage_gpu_outputs; "
                            f"stage_gpu_outputs({contract.profile!r})"], env=env, cwd=REPO_ROOT, check=True)
        print(f"  {name}: {run.cells_run} code cells ran; "
              + (f"stopped at cell {run.stopped_at}: {run.error[:160]}" if run.stopped_at is not None else "every cell ran"),
              flush=True)
        runs.append((run, boundary))
    return runs


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
          f"{len(contract.notebooks)} notebooks up to the machine, {len(contract.tests)} test paths", flush=True)
    broken = [(run, boundary) for run, boundary in execute_notebooks(contract) if not run.holds(boundary)]
    for run, boundary in broken:
        print(f"contract {contract.profile}: {run.notebook} did not reach its boundary ({boundary!r}): "
              + (f"cell {run.stopped_at} raised {run.error}" if run.stopped_at is not None else "no cell failed"),
              file=sys.stderr)
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *contract.tests,
                            *args.pytest_args], env=environment(contract), cwd=REPO_ROOT).returncode
    return tests or (1 if broken else 0)


if __name__ == "__main__":
    raise SystemExit(main())
