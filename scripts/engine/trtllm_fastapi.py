"""Why the gpu-trtllm image may replace TensorRT-LLM's pinned FastAPI: the modules this tutorial
imports from TensorRT-LLM do not load it (only TensorRT-LLM's own OpenAI server, ``trtllm-serve``, does).

``python3 -m scripts.engine.trtllm_fastapi`` (the GPU workflow runs it in the image, before the
notebooks) imports them in a fresh interpreter, fails if ``fastapi`` came with them, and prints the
installed FastAPI beside what the TensorRT-LLM distribution asks for.
"""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata

#: What the notebooks and scripts use: the package, run.py's runtime (ModelRunnerCpp), trtllm-build's
#: entry point and the model definitions examples/llama/convert_checkpoint.py imports.
TUTORIAL_MODULES = ("tensorrt_llm", "tensorrt_llm.runtime", "tensorrt_llm.commands.build", "tensorrt_llm.models")
#: Imported with them: tritonclient's generated protobuf code, which needs the protobuf that
#: env/requirements-gpu.txt puts over the image's (a runtime too old for it, or one that breaks an
#: import of TensorRT-LLM, fails here, before any notebook).
PROTOBUF_MODULES = ("tritonclient.grpc.model_config_pb2",)


def loads(modules: tuple[str, ...] | list[str], target: str = "fastapi", python: str = sys.executable) -> bool:
    """Whether importing ``modules`` in a fresh interpreter also imports ``target``."""
    code = f"import sys\nfor m in {list(modules)!r}: __import__(m)\nprint({target!r} in sys.modules)"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"importing {list(modules)} failed:\n{out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1] == "True"


def requirement(distribution: str, name: str) -> str | None:
    """The requirement ``distribution`` declares on ``name`` (e.g. ``fastapi==0.115.4``), if any."""
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return None
    return next((r.split(";")[0].strip() for r in requires
                 if r.split(";")[0].strip().lower().replace("_", "-").startswith(name)), None)


def main() -> int:
    installed = metadata.version("fastapi")
    print(f"fastapi {installed} installed; tensorrt-llm asks for {requirement('tensorrt-llm', 'fastapi')}; "
          f"ray[serve] for {requirement('ray', 'fastapi')}")
    if loads(TUTORIAL_MODULES + PROTOBUF_MODULES):
        print(f"error: importing {', '.join(TUTORIAL_MODULES)} loads fastapi: the FastAPI that ray[serve] needs "
              "replaces the one TensorRT-LLM pins, and this tutorial's TensorRT-LLM path depends on it; "
              "see env/requirements-gpu.txt", file=sys.stderr)
        return 1
    print(f"ok: {', '.join(TUTORIAL_MODULES)} import without fastapi")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
