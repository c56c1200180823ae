"""Assert the key values the notebooks' check cells recorded (run after `pytest --nbval notebooks`)."""
import json
from pathlib import Path

import pytest

from scripts import results
from scripts.engine import read_engine_config
from scripts.run import reference_path


def test_00_model_made():
    r = results.load("00_check_environment")
    assert r["tritonserver"] == "2.51.0" and r["python"].startswith("3.11.")
    assert r["architecture"] == "LlamaForCausalLM"
    model_dir = Path(r["model_dir"])
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file()
    if r["profile"] == "cpu":
        assert 300_000 < r["parameters"] < 2_000_000 and r["vocab_size"] <= 2048


def test_01_engine_config_readable():
    r = results.load("01_build_engine")
    config = read_engine_config(Path(r["engine_config"]).parent)
    assert config["engine"] == r["engine"] and r["check_output"].strip()


def test_03_reference_saved():
    r = results.load("03_verify_engine")
    ref = json.loads(reference_path().read_text())
    assert len(ref["results"]) == r["prompts"] == 5
    assert [len(x["output_ids"]) for x in ref["results"]] == r["output_lengths"]
    for x in ref["results"]:
        assert 0 < len(x["output_ids"]) <= ref["max_output_len"] == 32
        assert x["output_text"].strip()
    if results.load("00_check_environment")["profile"] == "cpu":
        # the tiny Llama recites its corpus: the first reference continues a corpus sentence
        assert ref["results"][0]["output_text"].startswith(" the traffic, balances it, scales the replicas")
