"""The keyword that sets the weights' dtype in ``from_pretrained``, for the installed transformers.

transformers 4.56 renamed ``torch_dtype=`` to ``dtype=`` (``modeling_utils.py``: ``from_pretrained``
pops ``dtype`` from 4.56.0 on; 4.56 still takes ``torch_dtype`` with a warning). Before 4.56 ``dtype=``
travels with the config's unused kwargs into the model's ``__init__`` and raises ``TypeError``
(4.47.1, the NGC 25.02 TensorRT-LLM container's: ``from_pretrained`` pops only ``torch_dtype``).
"""
from __future__ import annotations

import re
from typing import Any

#: The first transformers release whose ``from_pretrained`` takes ``dtype=``.
DTYPE_KEYWORD_SINCE = (4, 56)


def _major_minor(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        raise ValueError(f"not a transformers version: {version!r} (expected e.g. '4.47.1')")
    return int(m.group(1)), int(m.group(2))


def dtype_keyword(version: str | None = None) -> str:
    """``"dtype"`` from transformers 4.56 on, ``"torch_dtype"`` before; ``version``: the installed one."""
    if version is None:
        import transformers  # noqa: PLC0415 - heavy

        version = transformers.__version__
    return "dtype" if _major_minor(version) >= DTYPE_KEYWORD_SINCE else "torch_dtype"


def dtype_kwargs(dtype: Any, version: str | None = None) -> dict[str, Any]:
    """``{keyword: dtype}`` to pass to ``from_pretrained`` (see :func:`dtype_keyword`)."""
    return {dtype_keyword(version): dtype}
