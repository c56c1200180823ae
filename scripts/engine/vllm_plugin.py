"""vLLM general plugin: what every vLLM process of this tutorial does first.

Why it is built this way, and the sources: docs/design/engine.md.
"""
from __future__ import annotations


def request_amx() -> bool:
    """Ask Linux for AMX tile state in this process, where the CPU has AMX; True once granted."""
    import torch  # noqa: PLC0415 - vLLM has imported it already

    if not torch.cpu._is_amx_tile_supported():
        return False
    return bool(torch._C._cpu._init_amx())  # PyTorch's own arch_prctl(ARCH_REQ_XCOMP_PERM) call
