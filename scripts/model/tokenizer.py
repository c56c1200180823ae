"""A checkpoint's tokenizer, loaded without importing torch where transformers allows it.

Why it is built this way, and the sources: docs/design/model.md.
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


def decode_ids(tokenizer: Any, ids: Any, skip_special_tokens: bool = True) -> str:
    """The text of generated token ids, decoded the one way every layer and every comparison decodes them.

    One full decode of all the ids: run.py's reference text, the ensemble's postprocessing, the
    Serve replica's streamed pieces (:class:`scripts.serve.streaming.IncrementalDetokenizer`, whose
    pieces add up to this) and the notebooks' checks. Bytes of a character that never completes come
    out as U+FFFD, at the end of the text too: vLLM's own detokenizer (``RequestOutput.text``) holds
    such a tail back and drops it when the request ends, so its text for the same ids can be shorter.
    Compare ids where a layer returns them; a text only with another text made by this function."""
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
