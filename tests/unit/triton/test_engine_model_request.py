"""A request straight to the engine model (``tensorrt_llm`` or ``vllm_engine``) and its answer.

Upstream facts (triton-inference-server/tensorrtllm_backend@v0.17.0, "backend@v0.17.0" below):
- inflight_batcher_llm/src/model_instance_state.cc, fillTritonResponse: the request must ask for both
  ``output_ids`` and ``sequence_length``; ``output_ids`` is INT32 {1, beams, max_len}, each beam
  padded with -1 past its length, and ``sequence_length`` INT32 {1, beams} holds those lengths.
- model_instance_state.cc: ``exclude_input_in_output`` (bool parameter, default false) decides
  whether a non-streamed answer starts with the prompt; streamed responses hold only new tokens
  (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/llmRequest.cpp, LlmRequest::createResult,
  read at a commit later than v0.17.0: not checked at v0.17.0 itself).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from scripts.engine import config as engine
from scripts.profiles import load_profile
from scripts.triton.backend.request_handling import ENGINE_OUTPUTS
from scripts.triton.engine_request import EngineModelRequest, engine_model_request, generated_ids, tritonclient_args
from scripts.triton.repository.fill import RepoSettings, fill_for_profile, read_model_config

from fakes import FakeTokenizer, install_model

PROMPT = [1, 15, 27, 9]


@pytest.fixture(autouse=True)
def tokenizer_in_place(tiny_llama, build_root, monkeypatch):
    """Each profile's model folder holds a tokenizer (the session's tiny Llama): a request takes its EOS
    id from the tokenizer the repository's preprocessing model names."""
    monkeypatch.setenv("LLAMA_MODEL_DIR", str(build_root / "llama"))
    for name in ("cpu", "gpu-trtllm"):
        install_model(tiny_llama, load_profile(name))


def fill(profile_name: str, build_root: Path, decoupled: bool = False) -> Path:
    profile = load_profile(profile_name)
    engine.write_engine_config(profile)
    out = build_root / "triton_repo" / f"{profile_name}-{decoupled}"
    return Path(fill_for_profile(profile, RepoSettings(decoupled_mode=decoupled), output_dir=out)["repository"])


@pytest.fixture(params=["cpu", "gpu-trtllm"])
def repo(request, build_root):
    return fill(request.param, build_root)


def trtllm_answer(tokens: list[int], width: int) -> dict[str, np.ndarray]:
    """An answer shaped as fillTritonResponse writes it: [1, beams, width] padded with -1."""
    ids = np.full((1, 1, width), -1, dtype=np.int32)
    ids[0, 0, : len(tokens)] = tokens
    return {"output_ids": ids, "sequence_length": np.array([[len(tokens)]], dtype=np.int32)}


def test_request_fills_the_required_inputs_the_engine_config_declares(repo):
    req = engine_model_request(repo, PROMPT, 16)
    config = read_model_config(repo, req.model_name)
    assert req.model_name == {"vllm": "vllm_engine", "tensorrtllm": "tensorrt_llm"}[config.backend]
    assert set(req.inputs) == {"input_ids", "input_lengths", "request_output_len", "end_id", "pad_id"}
    assert {t.name for t in config.input if not t.optional} <= set(req.inputs)
    assert req.inputs["input_ids"].tolist() == [PROMPT]  # a batch of one, unpadded
    assert req.inputs["input_lengths"].tolist() == [[4]] and req.inputs["request_output_len"].tolist() == [[16]]
    assert all(a.dtype == np.int32 for a in req.inputs.values())  # TYPE_INT32 in both configs
    assert req.outputs == ENGINE_OUTPUTS == ("output_ids", "sequence_length")


def test_tensorrt_llm_request_asks_for_sequence_length_with_output_ids(build_root):
    # backend@v0.17.0 fillTritonResponse: "sequence_length tensor must be present in list of output tensors"
    req = engine_model_request(fill("gpu-trtllm", build_root), PROMPT, 8)
    assert req.model_name == "tensorrt_llm" and {"output_ids", "sequence_length"} <= set(req.outputs)


def test_tensorrt_llm_answer_gives_the_generated_ids(build_root):
    req = engine_model_request(fill("gpu-trtllm", build_root), PROMPT, 8)
    assert not req.output_includes_prompt  # the filled config sets exclude_input_in_output true
    assert generated_ids(req, trtllm_answer([40, 41, 42], 5)) == [40, 41, 42]


def test_tensorrt_llm_answer_with_the_prompt_is_cut_to_the_generated_ids(build_root):
    repo = fill("gpu-trtllm", build_root)
    path = repo / "tensorrt_llm" / "config.pbtxt"
    path.write_text(re.sub(r'(key: "exclude_input_in_output" value: \{ string_value: ")true', r"\g<1>false",
                           path.read_text()))
    req = engine_model_request(repo, PROMPT, 8)
    assert req.output_includes_prompt
    # exclude_input_in_output false: prompt + generation per beam, sequence_length counts both
    assert generated_ids(req, trtllm_answer(PROMPT + [40, 41], 8)) == [40, 41]
    # streamed, each response holds only its new tokens, prompt or not
    streamed = engine_model_request(fill("gpu-trtllm", build_root, decoupled=True), PROMPT, 8, streaming=True)
    assert not streamed.output_includes_prompt
    assert generated_ids(streamed, trtllm_answer([40], 1)) == [40]


def test_an_unparsable_exclude_input_in_output_means_the_prompt_comes_back(build_root):
    # GetParameter<bool> throws on "yes"; the backend keeps its default, false
    repo = fill("gpu-trtllm", build_root)
    path = repo / "tensorrt_llm" / "config.pbtxt"
    path.write_text(path.read_text().replace('"exclude_input_in_output" value: { string_value: "true"',
                                             '"exclude_input_in_output" value: { string_value: "yes"'))
    assert engine_model_request(repo, PROMPT, 8).output_includes_prompt


def test_cpu_engine_answer_gives_the_generated_ids(build_root):
    req = engine_model_request(fill("cpu", build_root), PROMPT, 8)
    assert req.model_name == "vllm_engine" and not req.output_includes_prompt
    # what the cpu engine model sends: [1, 1, n] generated ids and [[n]]
    answer = {"output_ids": np.array([[[40, 41, 42]]], dtype=np.int32), "sequence_length": np.array([[3]], np.int32)}
    assert generated_ids(req, answer) == [40, 41, 42]
    assert generated_ids(req, {"output_ids": np.zeros((1, 1, 0), np.int32), "sequence_length": np.array([[0]])}) == []


def test_streaming_needs_a_decoupled_engine(repo, build_root):
    with pytest.raises(ValueError, match="is not decoupled, so it cannot stream"):
        engine_model_request(repo, PROMPT, 8, streaming=True)
    decoupled = fill("cpu", build_root, decoupled=True)
    req = engine_model_request(decoupled, PROMPT, 8, streaming=True)
    assert req.inputs["streaming"].dtype == np.bool_ and req.inputs["streaming"].tolist() == [[True]]


def test_bad_requests_and_configs_are_refused(repo):
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        engine_model_request(repo, [], 8)
    with pytest.raises(ValueError, match="max_tokens must be a positive number of tokens, got 0"):
        engine_model_request(repo, PROMPT, 0)
    model = engine_model_request(repo, PROMPT, 8).model_name
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    beam_width = '{ name: "beam_width" data_type: TYPE_INT32 dims: [ 1 ]%s }, { name: "end_id" data_type: TYPE_INT32 dims: [ 1 ]'
    path.write_text(text.replace('{ name: "end_id" data_type: TYPE_INT32 dims: [ 1 ]', beam_width % " optional: true", 1))
    assert engine_model_request(repo, PROMPT, 8).inputs.keys() == {"input_ids", "input_lengths", "request_output_len",
                                                                   "end_id", "pad_id"}
    path.write_text(text.replace('{ name: "end_id" data_type: TYPE_INT32 dims: [ 1 ]', beam_width % "", 1))
    with pytest.raises(ValueError, match="requires input 'beam_width'"):
        engine_model_request(repo, PROMPT, 8)


def test_tensorrt_llm_config_without_sequence_length_is_refused(build_root):
    repo = fill("gpu-trtllm", build_root)
    path = repo / "tensorrt_llm" / "config.pbtxt"
    path.write_text(path.read_text().replace(',\n  { name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] }', ""))
    assert "sequence_length" not in {t.name for t in read_model_config(repo, "tensorrt_llm").output}
    with pytest.raises(ValueError, match="declares no output 'sequence_length'"):
        engine_model_request(repo, PROMPT, 8)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_args(protocol, build_root):
    import importlib

    module = importlib.import_module(f"tritonclient.{protocol}")
    req = engine_model_request(fill("gpu-trtllm", build_root), PROMPT, 8)
    inputs, outputs = tritonclient_args(req, module)
    assert [(i.name(), i.datatype(), i.shape()) for i in inputs] == [
        ("input_ids", "INT32", [1, 4]), ("input_lengths", "INT32", [1, 1]), ("request_output_len", "INT32", [1, 1]),
        ("end_id", "INT32", [1, 1]), ("pad_id", "INT32", [1, 1])]  # backend@v0.17.0 config.pbtxt: INT32 [1], optional
    assert [o.name() for o in outputs] == ["output_ids", "sequence_length"]


def test_request_is_plain_data():
    req = EngineModelRequest("m", {}, ("output_ids",), 2, True)
    assert generated_ids(req, {"output_ids": np.array([[[5, 6, 7, 8]]])}) == [7, 8]  # no sequence_length: all ids


def test_a_request_stops_at_the_eos_of_the_repositorys_tokenizer_as_run_py_does(repo, tiny_llama):
    """run.py passes the tokenizer's EOS as end_id; without one TensorRT-LLM's executor generates to
    request_output_len (backend@v0.17.0 utils.cc: an absent end_id reaches executor::Request as none)."""
    from scripts.model.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_llama)
    req = engine_model_request(repo, PROMPT, 8)
    assert req.inputs["end_id"].tolist() == [[tok.eos_token_id]] and req.inputs["end_id"].dtype == np.int32
    assert req.inputs["pad_id"].tolist() == [[tok.pad_token_id]]
    assert engine_model_request(repo, PROMPT, 8, ignore_eos=True).inputs["end_id"].tolist() == [[-1]]
    fake = engine_model_request(repo, PROMPT, 8, tokenizer=FakeTokenizer())  # no pad token: EOS pads
    assert fake.inputs["end_id"].tolist() == fake.inputs["pad_id"].tolist() == [[FakeTokenizer.eos_token_id]]


def test_a_repository_without_its_tokenizer_says_what_to_make(repo, tiny_llama):
    import shutil

    from scripts.triton.repository.fill import repository_facts

    shutil.rmtree(repository_facts(repo).tokenizer_dir)
    with pytest.raises(ValueError, match=r"no tokenizer at .*EOS id.*notebook 00_check_environment"):
        engine_model_request(repo, PROMPT, 8)
