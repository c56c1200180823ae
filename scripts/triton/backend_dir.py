"""The backend directory the ``nvidia-pytriton`` wheel's ``tritonserver`` runs with (``--backend-directory``).

The wheel's server has the Python backend but none of this repository's Python-based backends, and
its stub is built for one interpreter: :func:`prepare_backend_dir` assembles, under the build
directory, the Python backend, the stub for this interpreter and the ``vllm`` and ``transformers``
backends (``scripts/triton/backend/python_based``). The NGC container's server has its own.
"""
from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

from scripts import envcheck
from scripts.paths import PYTHON_BASED_BACKENDS, triton_backend_dir


def prepare_backend_dir(dest: Path | None = None) -> Path:
    """A backend directory for the wheel's server: Python backend + this interpreter's stub + this
    repository's Python-based backends (``vllm``, ``transformers``)."""
    dest = dest or triton_backend_dir()
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    wheel_python = envcheck.pytriton_root() / "backends" / "python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        install_file(wheel_python / name, python_dir / name)
    install_file(envcheck.python_backend_stub(), python_dir / "triton_python_backend_stub")
    for backend in sorted(p for p in PYTHON_BASED_BACKENDS.iterdir() if (p / "model.py").is_file()):
        (dest / backend.name).mkdir(exist_ok=True)
        install_file(backend / "model.py", dest / backend.name / "model.py")
    return dest


def install_file(src: Path, dst: Path) -> None:
    """Copy beside the target, then rename over it: a running server's stub ("text file busy")
    keeps its old inode, and a second server (a Serve replica, say) gets a complete file. A target
    equal to the source stays: replaced, it would leave every running stub's executable
    "(deleted)" for the next server that starts (two notebooks at once)."""
    if dst.is_file() and filecmp.cmp(src, dst, shallow=True):
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)
