"""vLLM general plugin: what every vLLM process of this tutorial does first.

vLLM runs the functions registered under the ``vllm.general_plugins`` entry-point group in each
of its processes (the engine core and every worker) before it loads a model. This repository
registers :func:`request_amx` there (``pyproject.toml``).

Why: on x86 CPUs with AMX (Intel Sapphire Rapids and later), vLLM's CPU attention runs bfloat16
through AMX tiles. Linux hands a process the AMX register state only after the process asks for it
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); an AMX instruction before that is an
illegal instruction. oneDNN asks when it first runs an AMX kernel of its own, but vLLM's attention
kernel does not, and a small model's matrix products may never take oneDNN's AMX path. The worker
then dies at the first request with SIGILL, which vLLM reports as ``Worker proc VllmWorker-0 died
unexpectedly (exit code: -4)`` followed by ``RuntimeError: cancelled`` and ``EngineDeadError``.
This plugin asks for the permission in every vLLM process. On a CPU without AMX it does nothing;
where the CPU has AMX, asking is harmless even if nothing then uses it (a GPU node). A process that
vLLM forks (``engine_start_method = "fork"``) runs the plugin no more (vLLM's ``plugins_loaded`` is
copied with it), and needs not: Linux copies the permission to a forked child and drops it only at
``exec`` (``fpu_inherit_perms``, ``arch/x86/kernel/fpu/core.c``), and its parent asked when it built
the engine's arguments.
"""
from __future__ import annotations


def request_amx() -> bool:
    """Ask Linux for AMX tile state in this process, where the CPU has AMX; True once granted."""
    import torch  # noqa: PLC0415 - vLLM has imported it already

    if not torch.cpu._is_amx_tile_supported():
        return False
    return bool(torch._C._cpu._init_amx())  # PyTorch's own arch_prctl(ARCH_REQ_XCOMP_PERM) call
