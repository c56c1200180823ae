"""One rule for vLLM's FlashInfer sampler: ``VLLM_USE_FLASHINFER_SAMPLER=0`` where FlashInfer is not importable.

vLLM's CUDA sampler imports FlashInfer at every engine start, uncaught, unless told not to (vllm 0.26
``vllm/v1/sample/ops/topk_topp_sampler.py``; ``VLLM_USE_FLASHINFER_SAMPLER``); the gpu-vllm wheelhouse
leaves FlashInfer out (env/requirements-gpu-vllm.in), and vLLM's own sampler does the same work.

Two callers, one rule: the project's own launches (``scripts.engine.config.vllm_environment``) and every
process of the GPU host's venv, whose ``tutorial.pth`` (written by ``env/wheelhouse.py install``) runs
:func:`apply` at interpreter start, so that ``vllm serve`` or ``serve run`` typed by hand starts too.
Standard library only: it runs at every start of that venv's interpreter.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import MutableMapping

VARIABLE = "VLLM_USE_FLASHINFER_SAMPLER"


def sampler_environment() -> dict[str, str]:
    """``{VARIABLE: "0"}`` where FlashInfer is not importable, else nothing (vLLM's default stands)."""
    return {} if importlib.util.find_spec("flashinfer") else {VARIABLE: "0"}


def apply(environ: MutableMapping[str, str] | None = None) -> None:
    """Set the rule's variables in ``environ`` (this process's environment, inherited by its children)
    where they are not set already: a value the user chose wins."""
    environ = os.environ if environ is None else environ
    for key, value in sampler_environment().items():
        environ.setdefault(key, value)
