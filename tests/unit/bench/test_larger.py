"""What notebook 07's larger-model point serves: the larger model, its engine config and Serve repository."""
import pytest

from scripts.bench import larger
from scripts.engine.config import read_engine_config
from scripts.model.larger_llama import LargerLlamaSpec
from scripts.profiles import load_profile
from scripts.serve.config import serve_repo_dir
from scripts.triton.repository.fill import repository_facts

from fakes import install_model

SMALL = LargerLlamaSpec(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def test_the_larger_model_gets_its_own_engine_config_and_serve_repository(build_root, tiny_llama):
    profile = load_profile("cpu")
    install_model(tiny_llama, profile)
    big, repo, made = larger.prepare_larger(profile, SMALL)
    model_dir = build_root / "models" / "larger-llama"
    assert made["made"] and made["model_dir"] == str(model_dir) and big["served_model_name"] == "larger-llama"
    config = read_engine_config(big.path("engine_dir"))
    assert big.path("engine_dir") == build_root / "engine" / "vllm-larger" != profile.path("engine_dir")
    assert config["model_dir"] == config["tokenizer_dir"] == str(model_dir)
    assert {k: config[k] for k in ("dtype", "max_model_len", "max_num_seqs", "kv_cache_space_gib", "enforce_eager")} == \
        {k: profile.get(k) for k in ("dtype", "max_model_len", "max_num_seqs", "kv_cache_space_gib", "enforce_eager")}
    facts = repository_facts(repo)
    assert repo != serve_repo_dir(profile) and facts.decoupled and facts.tokenizer_dir == str(model_dir)
    engine_pbtxt = (repo / facts.engine_model / "config.pbtxt").read_text()
    assert f'key: "engine_dir" value: {{ string_value: "{big.path("engine_dir")}" }}' in engine_pbtxt
    assert larger.prepare_larger(profile, SMALL)[2]["made"] is False  # the model is made once


def test_only_a_vllm_profile_has_the_larger_point():
    with pytest.raises(ValueError, match="runs tensorrt_llm"):
        larger.larger_profile(load_profile("gpu-trtllm"))
