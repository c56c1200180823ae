"""scripts.triton.sampling: a request's settings as the ensemble's tensors and as the engine model's."""
import numpy as np
import pytest

from scripts.triton.sampling import MAX_TOP_K, EnsembleRequest, ensemble_inputs, sampling_values


def test_greedy_request_sends_no_sampling_tensors():
    inputs = ensemble_inputs(EnsembleRequest("Ray Serve takes", 12), vocab_size=854)
    assert set(inputs) == {"text_input", "max_tokens", "stream"}
    assert inputs["text_input"].shape == (1, 1) and inputs["text_input"][0, 0] == b"Ray Serve takes"
    assert inputs["max_tokens"].dtype == np.int32 and inputs["max_tokens"][0, 0] == 12
    assert inputs["stream"].dtype == bool and not inputs["stream"][0, 0]


def test_sampling_uses_the_whole_distribution_unless_top_p_cuts_it():
    full = ensemble_inputs(EnsembleRequest("p", 4, temperature=0.7), vocab_size=854)
    assert full["temperature"].dtype == np.float32 and full["temperature"][0, 0] == pytest.approx(0.7)
    assert full["top_k"][0, 0] == 854 and "top_p" not in full  # vocabulary smaller than TensorRT-LLM's cap
    big = ensemble_inputs(EnsembleRequest("p", 4, temperature=1.0), vocab_size=128256)
    assert big["top_k"][0, 0] == MAX_TOP_K
    nucleus = ensemble_inputs(EnsembleRequest("p", 4, temperature=1.0, top_p=0.9), vocab_size=854)
    assert nucleus["top_p"][0, 0] == pytest.approx(0.9) and "top_k" not in nucleus


def test_stop_seed_and_penalties_become_tensors():
    inputs = ensemble_inputs(EnsembleRequest("p", 4, stream=True, stop=[" a", "b"], seed=7, presence_penalty=0.5,
                                             frequency_penalty=-0.5), vocab_size=10)
    assert inputs["stop_words"].shape == (1, 2) and list(inputs["stop_words"][0]) == [b" a", b"b"]
    assert inputs["random_seed"].dtype == np.uint64 and inputs["random_seed"][0, 0] == 7
    assert inputs["presence_penalty"][0, 0] == pytest.approx(0.5) and inputs["frequency_penalty"][0, 0] == pytest.approx(-0.5)
    assert inputs["stream"][0, 0]


def test_the_engine_model_gets_the_same_sampling_under_its_own_names():
    req = EnsembleRequest("p", 4, temperature=0.7, seed=3, presence_penalty=0.5)
    assert sampling_values(req, 854, top_k="runtime_top_k", top_p="runtime_top_p") == {
        "temperature": 0.7, "runtime_top_k": 854, "random_seed": 3, "presence_penalty": 0.5}
    nucleus = EnsembleRequest("p", 4, temperature=1.0, top_p=0.9)
    assert sampling_values(nucleus, 854, top_k="runtime_top_k", top_p="runtime_top_p") == {
        "temperature": 1.0, "runtime_top_p": 0.9}
    assert sampling_values(EnsembleRequest("p", 4), 854) == {}  # greedy: TensorRT-LLM's default
