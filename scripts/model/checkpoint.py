"""The checkpoint each profile starts from: the embedded tiny Llama, a model of a real model's shape
with random weights, or a local Llama."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from scripts.model import configs
from scripts.model.configs import llama_parameter_count
from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama, quiet_transformers
from scripts.profiles import Profile

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


def make_shaped_model(model_dir: Path, shape: dict[str, Any], tokenizer_dir: Path, dtype: str = "bfloat16",
                      seed: int = 0) -> dict[str, Any]:
    """A Llama with ``shape``'s architecture (a real model's ``config.json`` fields) and random weights,
    saved with the tokenizer of ``tokenizer_dir``.

    Its memory is the real model's: the weights (vocabulary included) and the KV cache per token have
    the real sizes, which is what sizing engines, instances and replicas is about. Its text is noise.
    The borrowed tokenizer knows only its first ids, and the others decode to nothing, so their
    embedding rows are zero: their logits are 0 while the known ids' largest is positive, and greedy
    decoding picks tokens that print.
    Made on the GPU when there is one (seconds), else on the CPU (a minute for a 1B model).
    """
    import torch  # noqa: PLC0415 - heavy
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    quiet_transformers()
    model_dir = Path(model_dir)
    marker = model_dir / "shape.json"
    wanted = {"shape": shape, "dtype": dtype, "seed": seed, "tokenizer": str(tokenizer_dir), "unknown_ids": "zero"}
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if not (marker.is_file() and json.loads(marker.read_text()) == wanted and (model_dir / "config.json").is_file()):
        fields = {k: v for k, v in shape.items() if k != "torch_dtype"}
        config = LlamaConfig(**fields, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id)
        torch.manual_seed(seed)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.device(device):
            model = LlamaForCausalLM(config).to(getattr(torch, dtype))
        with torch.no_grad():
            for layer in {id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
                layer.weight[len(tokenizer):] = 0
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        marker.write_text(json.dumps(wanted, indent=2) + "\n")
        del model
    size = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    return {"model_dir": str(model_dir), "size_bytes": size,
            "parameters": llama_parameter_count(shape), "tokenizer_vocab": len(tokenizer)}


def prepare_model(profile: Profile, spec: TinyLlamaSpec = TinyLlamaSpec()) -> dict[str, Any]:
    """Make (``embedded``, ``shaped``) or locate (``local``) the profile's Hugging Face checkpoint.

    ``shaped`` gives way to ``local`` when the profile's ``model_dir_env`` (``$LLAMA_MODEL_DIR``) is set:
    a reader with the real checkpoint serves it instead of random weights."""
    model_dir = profile.path("model_dir")
    source = profile["model_source"]
    if source == "shaped" and os.environ.get(profile.get("model_dir_env") or "", ""):
        source = "local"
    if source == "shaped":
        tokenizer_dir = profile.path("tokenizer_source_dir")
        make_tiny_llama(tokenizer_dir, spec)  # its tokenizer, trained offline (and the tiny model, kept beside)
        shape = getattr(configs, profile["model_shape"])
        made = make_shaped_model(model_dir, shape, tokenizer_dir, profile["dtype"], int(profile.get("seed", 0)))
        return {"source": source, "shape": profile["model_shape"], **made, **describe_checkpoint(model_dir)}
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
    raise ValueError(f"profile {profile.name!r}: unknown model_source {source!r} (use 'embedded', 'shaped' or 'local')")
