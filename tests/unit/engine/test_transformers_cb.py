"""transformers' continuous batching as the gpu-transformers engine: its settings, its refusals, and
the engine itself on the CPU with the tiny Llama (the path CI keeps from rotting between GPU runs)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from scripts.engine import config as engine
from scripts.engine import transformers_cb as cb
from scripts.engine.run import main as run_main
from scripts.profiles import load_profile

from fakes import transformers_engine_on_cpu

TINY_SHAPE = SimpleNamespace(num_hidden_layers=2, num_key_value_heads=2, num_attention_heads=4, hidden_size=128, head_dim=32)


@pytest.fixture(scope="module")
def tiny_engine_dir(tmp_path_factory, tiny_llama):
    with transformers_engine_on_cpu(tmp_path_factory.mktemp("build"), tiny_llama) as (_, engine_dir):
        yield engine_dir


def test_profile_settings_reach_the_engine_config(tmp_path):
    settings = engine.engine_settings(load_profile("gpu-transformers", root=tmp_path))
    assert settings["engine"] == "transformers" and settings["kv_cache_free_gpu_mem_fraction"] == 0.5
    assert settings["dtype"] == "bfloat16" and settings["max_num_seqs"] == 64


def test_gpu_budget_is_a_fraction_of_free_memory():
    kwargs = cb.cb_config_kwargs({"max_num_seqs": 8, "max_model_len": 512, "kv_cache_free_gpu_mem_fraction": 0.3},
                                 "cuda:0", TINY_SHAPE, 2)
    assert kwargs["max_memory_percent"] == 0.3 and "num_blocks" not in kwargs and kwargs["allow_block_sharing"] is False
    with pytest.raises(ValueError, match="within"):
        cb.cb_config_kwargs({"max_num_seqs": 8, "max_model_len": 512, "kv_cache_free_gpu_mem_fraction": 1.5},
                            "cuda:0", TINY_SHAPE, 2)


def test_cpu_budget_is_a_fixed_space_in_blocks():
    block = cb.kv_block_bytes(TINY_SHAPE, 32, 2)
    assert block == 2 * 2 * 2 * 32 * 32 * 2
    kwargs = cb.cb_config_kwargs({"max_num_seqs": 8, "max_model_len": 512, "kv_cache_space_gib": 1, "page_size": 32},
                                 "cpu", TINY_SHAPE, 2)
    assert kwargs["num_blocks"] == 2**30 // block and kwargs["max_batch_tokens"] == 512
    with pytest.raises(ValueError, match="raise it"):
        cb.cb_config_kwargs({"max_num_seqs": 8, "max_model_len": 512, "kv_cache_space_gib": block * 3 / 2**30,
                             "page_size": 32}, "cpu", TINY_SHAPE, 2)


@pytest.mark.parametrize("sampling, words", [({"temperature": 0.7}, "greedily"), ({"top_k": 5}, "top_k"),
                                             ({"logit_bias": {3: -100}}, "bad_words"), ({"seed": 1}, "seed")])
def test_sampling_is_refused_not_ignored(sampling, words):
    with pytest.raises(cb.EngineRequestError, match=words):
        cb.refuse_sampling({"max_tokens": 8, "temperature": 0.0} | sampling)
    cb.refuse_sampling({"max_tokens": 8, "temperature": 0.0, "stop": ["x"], "ignore_eos": True})


def test_stop_position_counts_ids_up_to_the_word():
    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "".join(chr(96 + i) for i in ids))
    assert cb.stop_position(tok, [1, 2, 3, 4], ["bc"]) == 3
    assert cb.stop_position(tok, [1, 2], ["z"]) is None and cb.stop_position(tok, [1], []) is None
    assert cb.stop_position(tok, [1, 2, 3, 4], ["bc"], checked=2) == 3  # only prefixes not looked at before
    assert cb.stop_position(tok, [1, 2, 3, 4], ["cd"], checked=3) == 4


def test_engine_on_the_cpu_is_greedy_and_order_independent(tiny_engine_dir):
    from transformers import AutoTokenizer

    config = engine.read_engine_config(tiny_engine_dir)
    tokenizer = AutoTokenizer.from_pretrained(config["model_dir"])
    prompts = [tokenizer(p)["input_ids"] for p in ("Ray Serve takes", "The tokenizer turns", "Greedy decoding picks")]
    alone = cb.generate(config, prompts, 12, one_at_a_time=True)
    together = cb.generate(config, prompts, 12, ignore_eos=True)
    assert [o.generated_tokens for o in alone.outputs] == [o.generated_tokens for o in together.outputs]
    assert tokenizer.decode(alone.outputs[0].generated_tokens).startswith(" the traffic")
    assert together.generated_tokens == 36 and together.generate_s > 0


def test_run_py_writes_the_reference(tiny_engine_dir, tmp_path, capsys):
    out = tmp_path / "ref.json"
    assert run_main(["--engine_dir", str(tiny_engine_dir), "--max_output_len", "8", "--output_json", str(out),
                     "--input_text", "Ray Serve takes"]) == 0
    ref = json.loads(out.read_text())
    assert ref["engine"] == "transformers" and ref["runtime"] == "transformers continuous batching"
    assert len(ref["results"][0]["output_ids"]) == 8 and ref["results"][0]["output_text"].startswith(" the traffic")


def test_cancel_drops_the_handler_the_manager_would_never_call(tiny_engine_dir):
    eng = cb.Engine(engine.read_engine_config(tiny_engine_dir))
    try:
        router = eng.manager.output_router
        router.result_handlers["stopped-early"] = (lambda out: None, None)
        eng.cancel("stopped-early")
        assert "stopped-early" not in router.result_handlers
    finally:
        eng.stop()
