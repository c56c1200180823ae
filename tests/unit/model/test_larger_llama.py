"""The larger benchmark model: the tiny model's tokenizer, the architecture asked for, made once."""
import json
from dataclasses import replace

import pytest

from scripts.model.larger_llama import LargerLlamaSpec, make_larger_llama, parameter_count

SMALL = LargerLlamaSpec(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def test_the_model_has_the_spec_and_the_base_tokenizer_and_is_made_once(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "larger"
    made = make_larger_llama(out, tiny_llama, SMALL)
    base = json.loads((tiny_llama / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert made["made"] and made["parameters"] == parameter_count(SMALL, base["vocab_size"])
    assert made["size_bytes"] == sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (64, 2, 2)
    for key in ("vocab_size", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert config[key] == base[key], key
    model = AutoModelForCausalLM.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == made["parameters"]
    prompt = "Ray Serve takes"
    assert AutoTokenizer.from_pretrained(out)(prompt)["input_ids"] == AutoTokenizer.from_pretrained(tiny_llama)(prompt)["input_ids"]
    weights = (out / "model.safetensors").stat().st_mtime_ns
    assert make_larger_llama(out, tiny_llama, SMALL) == made | {"made": False}
    assert (out / "model.safetensors").stat().st_mtime_ns == weights  # kept, not made again
    assert make_larger_llama(out, tiny_llama, replace(SMALL, num_hidden_layers=3))["made"]


def test_the_default_is_a_few_hundred_mb_in_bfloat16(tiny_llama):
    vocab = json.loads((tiny_llama / "config.json").read_text())["vocab_size"]
    assert 200e6 < 2 * parameter_count(LargerLlamaSpec(), vocab) < 500e6


def test_a_missing_base_or_a_spec_that_does_not_split_is_refused(tiny_llama, tmp_path):
    with pytest.raises(FileNotFoundError, match="run notebook 00 first"):
        make_larger_llama(tmp_path / "out", tmp_path / "none", SMALL)
    with pytest.raises(ValueError, match="must split into num_attention_heads 3"):
        make_larger_llama(tmp_path / "out", tiny_llama, LargerLlamaSpec(hidden_size=64, num_attention_heads=3, num_key_value_heads=1))
