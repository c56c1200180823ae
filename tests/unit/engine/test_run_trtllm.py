"""run.py's TensorRT-LLM path against a fake ``tensorrt_llm.runtime`` (trtllm_fakes.py) that takes
the arguments of TensorRT-LLM@v0.17.0 and refuses what it refuses.

Upstream files these tests hold run.py to (TensorRT-LLM@v0.17.0):
  examples/run.py                        ModelRunnerCpp unless --use_py_session; from_dir kwargs;
                                         generate(..., output_sequence_lengths=True, return_dict=True)
  tensorrt_llm/runtime/model_runner.py   ModelRunnerMixin._check_inputs: batch <= max_batch_size
  tensorrt_llm/runtime/model_runner_cpp.py  ModelRunnerCpp.from_dir(engine_dir, *, rank, max_batch_size,
                                         max_input_len, max_output_len, max_beam_width, ...)
"""
import json
import sys

import pytest

from scripts.engine import config as engine
from scripts.engine import run
from scripts.engine.run import RunError
from scripts.profiles import load_profile
from trtllm_fakes import expected_new_tokens, make_modules

ENGINE_MAX_BATCH = 4
BOS_ID = 5  # not 0, like Llama-3's <|begin_of_text|> (128000)
PROMPTS = ["ray serve takes", "triton loads the model", "hello", "the engine runs", "one more prompt here", "six"]


def word_tokenizer(bos_id: int = BOS_ID):
    """A small Hugging Face tokenizer whose BOS id is ``bos_id``, prepended on encode like Llama's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for p in PROMPTS for w in p.split()})
    specials = ["<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    filler = [f"<reserved_{i}>" for i in range(len(vocab), bos_id)]
    vocab |= {t: len(vocab) + i for i, t in enumerate(filler)}
    vocab["<|begin_of_text|>"] = len(vocab)
    assert vocab["<|begin_of_text|>"] == bos_id
    vocab |= {w: len(vocab) + i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       special_tokens=[("<|begin_of_text|>", bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


@pytest.fixture
def trtllm_engine(build_root, tmp_path, monkeypatch):
    """A gpu-trtllm engine directory as notebook 01 leaves it: engine_config.json plus the engine's
    own config.json, in which trtllm-build records build_config.max_batch_size."""
    model_dir = tmp_path / "llama"
    word_tokenizer().save_pretrained(model_dir)
    monkeypatch.setenv("LLAMA_MODEL_DIR", str(model_dir))
    engine_dir = engine.write_engine_config(load_profile("gpu-trtllm")).parent
    (engine_dir / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": ENGINE_MAX_BATCH}}))
    return engine_dir


@pytest.fixture
def batched_engine(trtllm_engine):
    """The same engine, its config saying greedy output is batch-invariant: run.py batches its prompts."""
    path = trtllm_engine / engine.ENGINE_CONFIG
    path.write_text(json.dumps(json.loads(path.read_text()) | {"batch_invariant": True}))
    return trtllm_engine


@pytest.fixture
def fake_trtllm(monkeypatch):
    package, runtime, calls = make_modules()
    monkeypatch.setitem(sys.modules, "tensorrt_llm", package)
    monkeypatch.setitem(sys.modules, "tensorrt_llm.runtime", runtime)
    return calls


def run_main(engine_dir, out, prompts, *extra, max_output_len=3):
    argv = ["--engine_dir", str(engine_dir), "--max_output_len", str(max_output_len), "--output_json", str(out),
            *extra, "--input_text", *prompts]
    assert run.main(argv) == 0
    return json.loads(out.read_text())


def expected(prompt, max_output_len=3):
    ids = word_tokenizer()(prompt)["input_ids"]
    new = expected_new_tokens(ids, max_output_len, end_id=1)
    return ids, [t for t in new if t != 1]


def test_output_sequence_lengths_is_asked_for_as_upstream_run_py_does(trtllm_engine, fake_trtllm, tmp_path):
    """Item 2. TensorRT-LLM@v0.17.0:examples/run.py passes output_sequence_lengths=True with
    return_dict=True; without it the result has no "sequence_lengths" (the old run.py's KeyError)."""
    ref = run_main(trtllm_engine, tmp_path / "ref.json", ["hello", "triton loads the model"])
    generate_calls = [c for c in fake_trtllm if c[0] == "generate"]
    assert generate_calls and all(c[3]["output_sequence_lengths"] and c[3]["return_dict"] for c in generate_calls)
    for r in ref["results"]:
        ids, new = expected(r["input_text"])
        assert r["input_ids"] == ids and r["output_ids"] == new  # cut at sequence_lengths, not at the padding
    assert [r["finish_reason"] for r in ref["results"]] == ["stop", "length"]


def test_more_prompts_than_max_batch_size_go_in_batches_in_order(batched_engine, fake_trtllm, tmp_path):
    """Item 3. ModelRunnerMixin._check_inputs (TensorRT-LLM@v0.17.0:tensorrt_llm/runtime/model_runner.py)
    refuses a batch larger than the engine's max_batch_size (4 here): 6 prompts go as 4 + 2."""
    ref = run_main(batched_engine, tmp_path / "ref.json", PROMPTS)
    assert [len(c[2]) for c in fake_trtllm if c[0] == "generate"] == [4, 2]
    assert [r["input_text"] for r in ref["results"]] == PROMPTS
    for r in ref["results"]:
        assert (r["input_ids"], r["output_ids"]) == expected(r["input_text"])


def test_model_runner_cpp_is_the_default_with_upstream_from_dir_kwargs(batched_engine, fake_trtllm, tmp_path):
    """Item 13. TensorRT-LLM@v0.17.0:examples/run.py takes ModelRunnerCpp unless --use_py_session and
    sizes it with ModelRunnerCpp.from_dir's keywords (tensorrt_llm/runtime/model_runner_cpp.py)."""
    ref = run_main(batched_engine, tmp_path / "ref.json", PROMPTS, max_output_len=7)
    (kind, cls, kwargs), *_ = fake_trtllm
    longest = max(len(word_tokenizer()(p)["input_ids"]) for p in PROMPTS)
    assert (kind, cls) == ("from_dir", "ModelRunnerCpp")
    assert kwargs == {"engine_dir": str(batched_engine), "rank": 0, "max_batch_size": ENGINE_MAX_BATCH,
                      "max_input_len": longest, "max_output_len": 7, "max_beam_width": 1}
    assert ref["runtime"] == "ModelRunnerCpp"
    assert {c[1] for c in fake_trtllm} == {"ModelRunnerCpp"}


def test_use_py_session_takes_the_python_model_runner(batched_engine, fake_trtllm, tmp_path):
    """--use_py_session as in TensorRT-LLM@v0.17.0:examples/utils.py; ModelRunner.from_dir gets
    engine_dir and rank only (tensorrt_llm/runtime/model_runner.py)."""
    ref = run_main(batched_engine, tmp_path / "ref.json", PROMPTS, "--use_py_session")
    assert fake_trtllm[0] == ("from_dir", "ModelRunner", {"engine_dir": str(batched_engine), "rank": 0})
    assert ref["runtime"] == "ModelRunner" and [len(c[2]) for c in fake_trtllm[1:]] == [4, 2]


def test_small_batches_size_the_executor_to_the_prompts(batched_engine, fake_trtllm, tmp_path):
    run_main(batched_engine, tmp_path / "ref.json", ["hello", "six"])
    assert fake_trtllm[0][2]["max_batch_size"] == 2


def test_without_cpp_bindings_it_falls_back_to_the_python_session(trtllm_engine, monkeypatch, tmp_path, capsys):
    """TensorRT-LLM@v0.17.0:examples/run.py: no PYTHON_BINDINGS, no ModelRunnerCpp."""
    package, runtime, calls = make_modules(python_bindings=False)
    monkeypatch.setitem(sys.modules, "tensorrt_llm", package)
    monkeypatch.setitem(sys.modules, "tensorrt_llm.runtime", runtime)
    ref = run_main(trtllm_engine, tmp_path / "ref.json", ["hello"])
    assert ref["runtime"] == "ModelRunner" and calls[0][1] == "ModelRunner"
    assert "C++ bindings are unavailable" in capsys.readouterr().err


def test_bos_token_id_is_the_tokenizers_and_starts_every_prompt(trtllm_engine, fake_trtllm, tmp_path):
    """Item 4: notebook 03 asserts input_ids[0] == bos_token_id; Llama-3's BOS is 128000, not 0."""
    ref = run_main(trtllm_engine, tmp_path / "ref.json", PROMPTS)
    assert ref["bos_token_id"] == BOS_ID
    assert all(r["input_ids"][0] == ref["bos_token_id"] for r in ref["results"])
    assert ref["engine"] == "tensorrt_llm" and ref["max_output_len"] == 3


def test_ignore_eos_sends_end_id_minus_one(trtllm_engine, fake_trtllm, tmp_path):
    ref = run_main(trtllm_engine, tmp_path / "ref.json", ["hello"], "--ignore_eos")
    assert [c[3]["end_id"] for c in fake_trtllm if c[0] == "generate"] == [-1]
    assert len(ref["results"][0]["output_ids"]) == 2  # the fake's rule: len(prompt) tokens, no end token


def test_a_reference_for_an_engine_that_is_not_batch_invariant_sends_one_prompt_at_a_time(trtllm_engine, fake_trtllm,
                                                                                          tmp_path):
    """fp16 on a GPU is not batch-invariant (the profile's batch_invariant): Triton's clients send each
    prompt alone, so run.py does too, and the executor is sized for one."""
    profile = load_profile("gpu-trtllm")
    assert json.loads((trtllm_engine / engine.ENGINE_CONFIG).read_text())["batch_invariant"] is profile["batch_invariant"]
    assert profile["batch_invariant"] is False
    ref = run_main(trtllm_engine, tmp_path / "ref.json", PROMPTS)
    assert fake_trtllm[0][2]["max_batch_size"] == 1
    assert [c[2] for c in fake_trtllm if c[0] == "generate"] == [[expected(p)[0]] for p in PROMPTS]
    for r in ref["results"]:
        assert (r["input_ids"], r["output_ids"]) == expected(r["input_text"])


def test_reference_batch_size_follows_the_engine_configs_batch_invariant(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 16}}))
    assert run.reference_batch_size({"engine_dir": str(tmp_path), "batch_invariant": True}) == 16
    assert run.reference_batch_size({"engine_dir": str(tmp_path), "batch_invariant": False}) == 1
    assert run.reference_batch_size({"engine_dir": str(tmp_path)}) == 1  # a bare trtllm-build output does not say


@pytest.mark.parametrize("runner_flag", [(), ("--use_py_session",)])
def test_a_prompt_longer_than_the_engines_max_input_len_is_refused_before_the_engine_starts(
        trtllm_engine, fake_trtllm, tmp_path, capsys, runner_flag):
    """trtllm-build fixes max_input_len (build_config in the engine's config.json); both runners and
    the executor refuse a longer prompt with an error that does not say what to change."""
    (trtllm_engine / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": ENGINE_MAX_BATCH,
                                                                            "max_input_len": 4}}))
    argv = ["--engine_dir", str(trtllm_engine), "--max_output_len", "3", *runner_flag,
            "--input_text", "hello", "triton loads the model"]  # 2 and 5 tokens (BOS included)
    assert run.main(argv) == 2
    err = capsys.readouterr().err
    assert "--input_text #1 has 5 tokens, more than the TensorRT-LLM engine's max_input_len of 4" in err
    assert "rebuild the engine with a larger max_input_len" in err and not fake_trtllm
    ref = run_main(trtllm_engine, tmp_path / "ref.json", ["hello", "the engine runs"], *runner_flag)  # 2 and 4 fit
    assert [len(r["input_ids"]) for r in ref["results"]] == [2, 4]


def test_engine_max_input_len_comes_from_the_engine_then_its_config(trtllm_engine):
    config = engine.read_engine_config(trtllm_engine)
    assert run.engine_max_input_len(config) == load_profile("gpu-trtllm")["max_input_len"]  # no build_config entry
    (trtllm_engine / "config.json").write_text(json.dumps({"build_config": {"max_input_len": 512}}))
    assert run.engine_max_input_len(config) == 512
    assert run.engine_max_input_len({"engine": "vllm", "max_model_len": 512}) is None


def test_engine_max_batch_size_comes_from_the_engines_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 16}}))
    assert run.engine_max_batch_size({"engine_dir": str(tmp_path), "max_batch_size": 4}) == 16
    (tmp_path / "config.json").unlink()
    assert run.engine_max_batch_size({"engine_dir": str(tmp_path), "max_batch_size": 4}) == 4
    with pytest.raises(RunError, match="no build_config.max_batch_size"):
        run.engine_max_batch_size({"engine_dir": str(tmp_path)})


def test_in_batches_keeps_order():
    assert run.in_batches(list("abcdefghij"), 4) == [list("abcd"), list("efgh"), list("ij")]
    assert run.in_batches([], 4) == []
    with pytest.raises(ValueError):
        run.in_batches([1], 0)


def test_a_multi_gpu_engine_is_refused(trtllm_engine, fake_trtllm):
    config = engine.read_engine_config(trtllm_engine) | {"tp_size": 2}
    with pytest.raises(RunError, match="mpirun"):
        run.generate_trtllm(config, ["hello"], 3, False)
