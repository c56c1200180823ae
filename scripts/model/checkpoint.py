"""The checkpoint each profile starts from: the embedded tiny Llama, or a local Llama."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.profiles import Profile
from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama

LLAMA_HF_ID = "meta-llama/Llama-3.2-1B-Instruct"


class ModelNotFound(FileNotFoundError):
    """The profile's checkpoint is not where the profile says; the message says how to get it."""


def describe_checkpoint(model_dir: Path) -> dict[str, Any]:
    config = json.loads((model_dir / "config.json").read_text())
    return {
        "architecture": (config.get("architectures") or ["?"])[0],
        "hidden_size": config.get("hidden_size"),
        "num_hidden_layers": config.get("num_hidden_layers"),
        "num_attention_heads": config.get("num_attention_heads"),
        "num_key_value_heads": config.get("num_key_value_heads"),
        "vocab_size": config.get("vocab_size"),
        "dtype": config.get("dtype", config.get("torch_dtype")),
        "has_chat_template": (model_dir / "chat_template.jinja").exists()
        or "chat_template" in json.loads((model_dir / "tokenizer_config.json").read_text()),
    }


def prepare_model(profile: Profile, spec: TinyLlamaSpec = TinyLlamaSpec()) -> dict[str, Any]:
    """Make (``embedded``) or locate (``local``) the profile's Hugging Face checkpoint."""
    model_dir = profile.path("model_dir")
    source = profile["model_source"]
    if source == "embedded":
        made = make_tiny_llama(model_dir, spec)
        return {"source": source, **made, **describe_checkpoint(model_dir)}
    if source == "local":
        if not (model_dir / "config.json").is_file() or not (model_dir / "tokenizer_config.json").is_file():
            env = profile.get("model_dir_env", "LLAMA_MODEL_DIR")
            raise ModelNotFound(
                f"no Hugging Face checkpoint at {model_dir}. Download {LLAMA_HF_ID} (its licence must be "
                f"accepted on huggingface.co first): `huggingface-cli download {LLAMA_HF_ID} --local-dir {model_dir}`, "
                f"or point ${env} at an existing copy."
            )
        return {"source": source, "model_dir": str(model_dir), **describe_checkpoint(model_dir)}
    raise ValueError(f"profile {profile.name!r}: unknown model_source {source!r} (use 'embedded' or 'local')")
