import json

import pytest

from scripts.model import tiny_llama as tiny_model
from scripts.model.checkpoint import ModelNotFound, prepare_model
from scripts.profiles import load_profile
from scripts.model.tiny_llama import TinyLlamaSpec


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_model.train_tokenizer(TinyLlamaSpec())


def test_tokenizer_has_special_tokens_and_chat_template(tokenizer):
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<s>", "</s>", "<pad>")
    assert tokenizer.convert_tokens_to_ids(["<s>", "</s>", "<pad>"]) == [0, 1, 2]
    assert tokenizer("Triton")["input_ids"][0] == tokenizer.bos_token_id
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered == "<s><|user|>\nHi</s>\n<|assistant|>\n"


def test_tokenizer_round_trips_text(tokenizer):
    text = "Ray Serve takes the traffic, and Triton batches it."
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text


def test_tokenizer_training_is_deterministic(tokenizer):
    again = tiny_model.train_tokenizer(TinyLlamaSpec())
    assert again.get_vocab() == tokenizer.get_vocab()


def test_training_sequences_end_with_eos(tokenizer):
    seqs = tiny_model.training_sequences(tokenizer)
    assert len(seqs) == len(tiny_model.corpus_lines()) + len(tiny_model.chat_examples())
    assert all(s[-1] == tokenizer.eos_token_id or s[-2] == tokenizer.eos_token_id for s in seqs)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    return out, tiny_model.make_tiny_llama(out / "a", TinyLlamaSpec(train_steps=3))


def test_make_tiny_llama_saves_hf_checkpoint(made):
    out, summary = made
    files = set(summary["files"])
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    config = json.loads((out / "a" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_key_value_heads"] == 2 and config["vocab_size"] == summary["vocab_size"]
    assert summary["size_bytes"] < 5_000_000


def test_make_tiny_llama_is_deterministic(made):
    out, _ = made
    tiny_model.make_tiny_llama(out / "b", TinyLlamaSpec(train_steps=3))
    assert (out / "a" / "model.safetensors").read_bytes() == (out / "b" / "model.safetensors").read_bytes()
    assert (out / "a" / "tokenizer.json").read_bytes() == (out / "b" / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("version, keyword", [("4.47.1", "torch_dtype"), (None, None)])
def test_greedy_hf_loads_with_the_dtype_keyword_of_the_installed_transformers(made, monkeypatch, version, keyword):
    """transformers 4.47 (the TensorRT-LLM container's) raises TypeError for ``dtype=``; from 4.56 on
    ``dtype=`` is the keyword, and ``torch_dtype=`` still works. Pretending to be 4.47.1 loads with
    ``torch_dtype=``; as installed (this venv's, or 4.47.1 itself under ``make test-contract``) loads
    with the keyword its major.minor calls for. Each load really runs."""
    import torch
    import transformers

    if version is not None:
        monkeypatch.setattr(transformers, "__version__", version)
    else:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        keyword = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    real = transformers.LlamaForCausalLM.from_pretrained.__func__
    seen = []

    def spy(cls, *args, **kwargs):
        seen.append(kwargs)
        model = real(cls, *args, **kwargs)
        seen.append(model.dtype)
        return model

    monkeypatch.setattr(transformers.LlamaForCausalLM, "from_pretrained", classmethod(spy))
    out, _ = made
    assert isinstance(tiny_model.greedy_hf(out / "a", "Ray Serve", max_new_tokens=2), str)
    assert seen == [{keyword: torch.float32}, torch.float32]


def test_prepare_model_for_gpu_profile_says_how_to_get_llama(build_root, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_MODEL_DIR", str(tmp_path / "absent"))
    with pytest.raises(ModelNotFound, match=r"huggingface-cli download meta-llama/Llama-3.2-1B-Instruct.*LLAMA_MODEL_DIR"):
        prepare_model(load_profile("gpu-trtllm"))


def test_prepare_model_for_gpu_profile_describes_local_checkpoint(build_root, monkeypatch, made):
    out, _ = made
    monkeypatch.setenv("LLAMA_MODEL_DIR", str(out / "a"))
    summary = prepare_model(load_profile("gpu-trtllm"))
    assert summary["source"] == "local" and summary["architecture"] == "LlamaForCausalLM"


def test_shaped_model_has_the_shape_and_prints_only_known_tokens(tmp_path, build_root):
    import torch
    from transformers import AutoModelForCausalLM

    from scripts.model.checkpoint import make_shaped_model
    from scripts.model.configs import LLAMA_3_2_1B, llama_parameter_count as parameter_count
    from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama

    tokenizer_dir = tmp_path / "tiny"
    make_tiny_llama(tokenizer_dir, TinyLlamaSpec(train_steps=1))
    shape = dict(LLAMA_3_2_1B, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=32, vocab_size=4096)
    made = make_shaped_model(tmp_path / "shaped", shape, tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "shaped")
    assert sum(p.numel() for p in model.parameters()) == parameter_count(shape) == made["parameters"]
    known = made["tokenizer_vocab"]
    assert model.config.vocab_size == 4096 and torch.all(model.get_output_embeddings().weight[known:] == 0)
    out = model.generate(torch.tensor([[1, 5, 9]]), max_new_tokens=8, do_sample=False)
    assert int(out[0, 3:].max()) < known
    assert parameter_count(LLAMA_3_2_1B) == 1_235_814_400  # Llama-3.2-1B's published size
