"""Every path the pipeline reads or writes, in one place.

Data flows one way through the build directory (``./build``, or ``$TUTORIAL_BUILD_DIR``): each
notebook writes there and the next one reads. The source folders it reads from are named here too.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR_ENV = "TUTORIAL_BUILD_DIR"

# Sources (in the repository)
PROFILES_FILE = REPO_ROOT / "env" / "profiles.toml"
SERVE_CONFIG_DIR = REPO_ROOT / "env" / "serve"
TEMPLATE_DIR = REPO_ROOT / "model_repository"
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
# Python-based Triton backends of this repository: one folder per backend, holding its model.py
PYTHON_BASED_BACKENDS = REPO_ROOT / "scripts" / "triton" / "backend" / "python_based"


def build_dir() -> Path:
    """The one directory each step writes into and the next one reads (``./build`` by default)."""
    return Path(os.environ.get(BUILD_DIR_ENV, REPO_ROOT / "build")).resolve()


def triton_repo_dir(name: str) -> Path:
    """A filled Triton model repository: ``<profile>`` (notebook 02) or ``<profile>-serve`` (notebook 05)."""
    return build_dir() / "triton_repo" / name


def reference_path() -> Path:
    """Where notebook 03 saves the greedy reference that Triton and Ray Serve must reproduce."""
    return build_dir() / "reference" / "greedy_reference.json"


def read_reference() -> dict:
    """Notebook 03's greedy reference (prompts, token ids, texts); missing, an error that names the step."""
    path = reference_path()
    if not path.is_file():
        raise FileNotFoundError(f"no greedy reference at {shown(path)}: run notebook 03 first, which writes it "
                                "(python -m scripts.lab.run_notebooks --only 03, or make run)")
    return json.loads(path.read_text())


#: Another folder for the values check cells record (a rehearsal's run keeps the cpu run's values as they are).
RESULTS_DIR_ENV = "TUTORIAL_RESULTS_DIR"


def results_path(notebook: str) -> Path:
    """The values a notebook's check cell recorded (read by ``tests/notebooks``): under ``build/results``,
    or ``$TUTORIAL_RESULTS_DIR``."""
    folder = os.environ.get(RESULTS_DIR_ENV)
    return (Path(folder) if folder else build_dir() / "results") / f"{notebook}.json"


def triton_backend_dir() -> Path:
    """The backend directory assembled for the wheel's ``tritonserver`` (``--backend-directory``)."""
    return build_dir() / "triton" / "backends"


def triton_log_dir() -> Path:
    """Where the servers started by this repository's code log (one file a server)."""
    return build_dir() / "triton" / "logs"


def triton_log_path(http_port: int) -> Path:
    return triton_log_dir() / f"tritonserver-{http_port}.log"


def in_process_lib_dir() -> Path:
    """Where the in-process probe links ``libtritonserver.so`` to the ``nvidia-pytriton`` wheel's library."""
    return build_dir() / "triton" / "in_process_lib"


def vllm_log_dir() -> Path:
    """Where the ``vllm serve`` processes started by this repository's code log (one file a server)."""
    return build_dir() / "vllm" / "logs"


def bench_result_dir(profile_name: str, smoke: bool) -> Path:
    """Where notebook 07 saves its benchmark runs and tables: one folder per profile, smoke and full apart."""
    return build_dir() / "results" / "bench" / f"{profile_name}-{'smoke' if smoke else 'full'}"


def lifecycle_dir() -> Path:
    """Notebook 08's own folder: its second model version and the repositories it loads and breaks."""
    return build_dir() / "08_lifecycle"


def executed_dir(profile_name: str) -> Path:
    """Where ``make run`` writes the executed copies of the notebooks."""
    return build_dir() / "executed" / profile_name


def shown(text: object) -> str:
    """``text`` with this machine's build and repository paths written as ``build/...`` and relative
    paths, so printed output reads the same on every machine."""
    return str(text).replace(str(build_dir()), "build").replace(str(REPO_ROOT) + "/", "")
