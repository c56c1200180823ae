"""A larger Llama for notebook 07's second benchmark point: a few hundred MB, made offline.

The tiny model makes a token nearly free, so the serving layers' cost per token dominates every
ratio measured with it. This model keeps the tiny one's tokenizer, special tokens and context
length, and scales the architecture up to about 137 M parameters (about 270 MB in bfloat16), so
that the engine's share of each token is closer to what a real deployment sees.

Its weights are seeded random, not trained: training a model this size on two cores would take
hours, and a throughput benchmark does not need sense. Every request runs to its full length
(``ignore_eos``), so the engine does the same work per token whatever the weights say; its answers
are noise, and notebook 07 counts only their tokens.

    python -m scripts.model.larger_llama --base build/models/tiny-llama --out build/models/larger-llama
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scripts.model.configs import llama_parameter_count
from scripts.model.tiny_llama import architecture, llama_config, quiet_transformers

SPEC_FILE = "larger_llama_spec.json"


@dataclass(frozen=True)
class LargerLlamaSpec:
    """Architecture; the defaults make about 137 M parameters with the tiny model's vocabulary."""

    hidden_size: int = 1024
    intermediate_size: int = 2816
    num_hidden_layers: int = 12
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    seed: int = 0
    dtype: str = "bfloat16"


def parameter_count(spec: LargerLlamaSpec, vocab_size: int) -> int:
    """What ``LlamaForCausalLM`` holds for ``spec`` (untied embeddings, no biases): a check on the
    model as saved, and the size it will have before it is made."""
    return llama_parameter_count(architecture(spec) | {"vocab_size": vocab_size})


def _summary(output_dir: Path, parameters: int, made: bool) -> dict[str, Any]:
    files = sorted(p for p in output_dir.iterdir() if p.is_file())
    return {"model_dir": str(output_dir), "parameters": parameters, "size_bytes": sum(p.stat().st_size for p in files),
            "made": made}


def make_larger_llama(output_dir: str | Path, base_dir: str | Path, spec: LargerLlamaSpec = LargerLlamaSpec()) -> dict[str, Any]:
    """Save the larger model in Hugging Face format in ``output_dir``, with the tokenizer of the model
    in ``base_dir`` (notebook 00's tiny Llama). A model already there, made from the same spec and
    base, is kept (``made`` False in the summary): the same seed makes the same weights."""
    output_dir, base_dir = Path(output_dir), Path(base_dir)
    if not (base_dir / "config.json").is_file():
        raise FileNotFoundError(f"no model in {base_dir}: run notebook 00 first (it makes the tiny Llama)")
    wanted = asdict(spec) | {"base_dir": str(base_dir.resolve())}
    spec_path = output_dir / SPEC_FILE
    if spec_path.is_file() and json.loads(spec_path.read_text()) == wanted:
        saved = json.loads((output_dir / "config.json").read_text())
        return _summary(output_dir, parameter_count(spec, saved["vocab_size"]), made=False)

    import torch  # noqa: PLC0415 - only when a model is made
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM  # noqa: PLC0415

    quiet_transformers()  # no "Writing model shards" bar in a notebook's output
    if spec.hidden_size % spec.num_attention_heads or spec.num_attention_heads % spec.num_key_value_heads:
        raise ValueError(f"hidden_size {spec.hidden_size} must split into num_attention_heads {spec.num_attention_heads}, "
                         f"and those into num_key_value_heads {spec.num_key_value_heads} groups")
    base = AutoConfig.from_pretrained(base_dir)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    config = llama_config(spec, vocab_size=base.vocab_size, max_position_embeddings=base.max_position_embeddings,
                          bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id, pad_token_id=base.pad_token_id)
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config).to(getattr(torch, spec.dtype))
    spec_path.unlink(missing_ok=True)  # a half-written model is never taken for a finished one
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    spec_path.write_text(json.dumps(wanted, indent=2) + "\n")
    return _summary(output_dir, sum(p.numel() for p in model.parameters()), made=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the tiny Llama's directory (its tokenizer is reused)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    print(json.dumps(make_larger_llama(args.out, args.base)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
