"""Can the in-process ``tritonserver`` API run outside the NGC containers? A probe that says how far it gets.

PyPI's ``tritonserver==2.73.0`` holds the Python bindings only (cp312, ``manylinux_2_39``); they link
``libtritonserver.so``, which ships in the NGC containers. The ``nvidia-pytriton`` wheel bundles
Triton 2.51's library as ``nvidia_pytriton.libs/libtritonserver-<hash>.so``. The probe gives the
bindings that library under the name they link (a ``libtritonserver.so`` link in the build
directory, on ``LD_LIBRARY_PATH`` of a child process: the loader reads it at process start), then
starts a server on a model repository, loads a model and runs one request, and reports the first
step that fails with its exact error.

    python -m scripts.triton.in_process_probe --repo build/triton_repo/gpu-transformers-serve
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from scripts import envcheck
from scripts.paths import in_process_lib_dir, triton_backend_dir
from scripts.procs.process_guard import stop_group
from scripts.triton.backend_dir import prepare_backend_dir


def library_dirs() -> list[Path]:
    """A folder holding ``libtritonserver.so``, a link to the ``nvidia-pytriton`` wheel's library, and
    the wheel's library folder (the libraries it needs: their renamed files are found there)."""
    root = envcheck.pytriton_root()
    found = [lib for d in root.parents for lib in sorted((d / "nvidia_pytriton.libs").glob("libtritonserver-*.so"))]
    if not found:
        raise FileNotFoundError(f"no nvidia_pytriton.libs/libtritonserver-*.so above {root}: pip install nvidia-pytriton==0.7.0")
    folder = in_process_lib_dir()
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "libtritonserver.so"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(found[0])
    return [folder, found[0].parent]


def child(repo: str, model: str, prompt: str) -> dict[str, Any]:
    """In the child process: each step in turn; the first failure ends the probe."""
    result: dict[str, Any] = {"ok": False}
    step = "import tritonserver"
    try:
        import tritonserver  # noqa: PLC0415

        result["bindings"] = getattr(tritonserver, "__version__", "?")
        step = "Server.start"
        server = tritonserver.Server(model_repository=repo, backend_directory=str(triton_backend_dir()),
                                     model_control_mode=tritonserver.ModelControlMode.EXPLICIT, log_info=False)
        server.start(wait_until_ready=True)
        result["server"] = server.metadata().get("version") if hasattr(server, "metadata") else "?"
        step = f"load {model}"
        handle = server.load(model)
        step = "infer"
        responses = list(handle.infer(inputs={"text_input": [[prompt]], "max_tokens": [[8]]}))
        result["responses"] = len(responses)
        step = "stop"
        server.stop()
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - the probe reports whatever stops it
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    result["step"] = step
    return result


def probe(repo: str | Path, model: str = "ensemble", prompt: str = "Ray Serve takes", timeout_s: float = 300) -> dict[str, Any]:
    """Run :func:`child` in a fresh process with the library on ``LD_LIBRARY_PATH``."""
    prepare_backend_dir()  # the wheel's Python backend and stub, as the launcher assembles them
    path = ":".join([*map(str, library_dirs()), os.environ.get("LD_LIBRARY_PATH", "")])
    env = os.environ | {"LD_LIBRARY_PATH": path}
    cmd = [sys.executable, "-m", "scripts.triton.in_process_probe", "--repo", str(repo), "--model", model, "--child"]
    # Its own process group: the stubs an embedded server starts go with it, whatever happens.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out, err = "", f"no answer within {timeout_s:.0f} s"
    finally:
        stop_group(proc.pid, grace_s=10)
        proc.wait()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {"ok": False, "step": "process", "error": f"exit {proc.returncode}: {err[-2000:]}"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Try the in-process tritonserver API on a model repository")
    p.add_argument("--repo", required=True)
    p.add_argument("--model", default="ensemble")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    result = child(args.repo, args.model, "Ray Serve takes") if args.child else probe(args.repo, args.model)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
