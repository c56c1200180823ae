"""A checkpoint's tokenizer, loaded without importing torch where transformers allows it.

``transformers.AutoTokenizer`` imports torch on its way in (``tokenization_auto`` ->
``configuration_utils`` -> ``generation`` -> ``torch``; ``python -X importtime -c "from
transformers import AutoTokenizer"`` shows it): about 3 s of a core, although a tokenizer uses none of
it. Triton's preprocessing and postprocessing models are tokenizers and nothing else, and every
start of the ensemble loads both, so on two cores a start waited about 3 s for them.

A checkpoint whose ``tokenizer_config.json`` names ``TokenizersBackend``, with no ``auto_map`` (custom
code), is what transformers 5 saves for a ``tokenizer.json`` of its own, as the tiny and the larger
Llama of this tutorial are. For such a Llama ``AutoTokenizer`` returns that same class
(transformers 5.19, ``AutoTokenizer.from_pretrained``: the class the tokenizer config names is
trusted unless the model type is one it knows to be named wrongly, and ``llama`` is not one), and
this module loads it straight from ``transformers.TokenizersBackend``, which imports no torch. Every
other checkpoint (a Hugging Face Llama naming ``PreTrainedTokenizerFast``, custom code, another
model type) goes through ``AutoTokenizer``. ``tests/unit/model/test_tokenizer.py`` checks both
choices against ``AutoTokenizer``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The class transformers 5 writes into tokenizer_config.json for a tokenizer of its own.
GENERIC_CLASS = "TokenizersBackend"
#: Model types whose generic tokenizer AutoTokenizer is known to return as it is.
GENERIC_MODEL_TYPES = ("llama",)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_generic(tokenizer_dir: str | Path) -> bool:
    """True when ``AutoTokenizer`` would return ``TokenizersBackend`` for this folder anyway."""
    folder = Path(tokenizer_dir)
    config = _read_json(folder / "tokenizer_config.json")
    return (config.get("tokenizer_class") == GENERIC_CLASS and "auto_map" not in config
            and (folder / "tokenizer.json").is_file()
            and _read_json(folder / "config.json").get("model_type") in GENERIC_MODEL_TYPES)


def load_tokenizer(tokenizer_dir: str | Path) -> Any:
    """The tokenizer ``AutoTokenizer.from_pretrained(tokenizer_dir)`` gives, without torch where it can."""
    if is_generic(tokenizer_dir):
        from transformers import TokenizersBackend  # noqa: PLC0415 - no torch behind it

        return TokenizersBackend.from_pretrained(str(tokenizer_dir))
    from transformers import AutoTokenizer  # noqa: PLC0415 - imports torch

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


def end_and_pad_ids(tokenizer: Any, ignore_eos: bool = False) -> tuple[int | None, int | None]:
    """``(end_id, pad_id)`` of an engine request: the tokenizer's EOS (``-1`` with ``ignore_eos``,
    which no token matches) and its pad id, EOS where it has none. run.py, the ensemble's
    preprocessing and direct engine requests all stop at this EOS, so their greedy ids agree."""
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return (-1 if ignore_eos else eos), pad
