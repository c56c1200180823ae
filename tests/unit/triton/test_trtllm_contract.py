"""The filled gpu-trtllm repository against what TensorRT-LLM's Triton backend v0.17.0 enforces.

The fill needs no GPU: the engine config is the one ``scripts.engine.config`` writes for the
profile. Every fact below is read from the upstream sources named beside it; the shorthand
``backend@v0.17.0:PATH`` is triton-inference-server/tensorrtllm_backend at tag v0.17.0 (the
backend of nvcr.io/nvidia/tritonserver:25.02-trtllm-python-py3).

The backend reads every parameter as a string and converts it (ModelState::GetParameter<T>,
backend@v0.17.0:inflight_batcher_llm/src/model_state.cc). Nearly all reads sit in a try block
whose catch logs a warning and keeps the default, so a misspelt name or a value of the wrong type
does not fail the load: the setting is silently ignored. That is why the types are checked here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.engine import config as engine
from scripts.profiles import load_profile
from scripts.triton.repository.fill import RepoSettings, fill_for_profile, read_model_config
from scripts.triton.repository.lint import lint

# -- facts from upstream --------------------------------------------------------------------------

# Every parameter name the v0.17.0 backend reads, with the type it converts the string to.
# backend@v0.17.0:inflight_batcher_llm/src/model_instance_state.cc (getBatchingTypeFromParams,
# getKvCacheConfigFromParams, getExtendedRuntimePerfKnobConfigFromParams, getPeftCacheConfigFromParams,
# getSchedulerConfigFromParams, getSpeculativeDecodingConfigFromParams, getExecutorConfigFromParams,
# the ModelInstanceState constructor) and backend@v0.17.0:inflight_batcher_llm/src/model_state.cc
# (LoadParameters, GetExecutorWorkerPath).
PARAMETERS_READ = {
    "gpt_model_type": "str", "gpt_model_path": "str", "encoder_model_path": "str",
    "max_tokens_in_paged_kv_cache": "int", "kv_cache_free_gpu_mem_fraction": "float",
    "cross_kv_cache_fraction": "float", "kv_cache_host_memory_bytes": "int", "kv_cache_onboard_blocks": "bool",
    "max_attention_window_size": "int_list", "sink_token_length": "int", "enable_kv_cache_reuse": "bool",
    "multi_block_mode": "bool", "enable_context_fmha_fp32_acc": "bool", "cuda_graph_mode": "bool",
    "cuda_graph_cache_size": "int", "lora_cache_max_adapter_size": "int", "lora_cache_optimal_adapter_size": "int",
    "lora_cache_gpu_memory_fraction": "float", "lora_cache_host_memory_bytes": "int",
    "batch_scheduler_policy": "str", "speculative_decoding_fast_logits": "bool", "max_beam_width": "int",
    "iter_stats_max_iterations": "int", "request_stats_max_iterations": "int", "enable_trt_overlap": "bool",
    "normalize_log_probs": "bool", "enable_chunked_context": "bool", "decoding_mode": "str",
    "medusa_choices": "str", "eagle_choices": "str", "gpu_weights_percent": "float", "recv_poll_period_ms": "int",
    "exclude_input_in_output": "bool", "cancellation_check_period_ms": "int", "stats_check_period_ms": "int",
    "gpu_device_ids": "str", "participant_ids": "str", "worker_path": "str", "executor_worker_path": "str",
}
# Read outside any try block, so a missing or unknown value fails the model load: "Invalid
# gpt_model_type. Must be v1/inflight_batching/inflight_fused_batching." (model_instance_state.cc,
# getBatchingTypeFromParams).
GPT_MODEL_TYPES = {"V1", "v1", "inflight_batching", "inflight_fused_batching"}
# getSchedulerConfigFromParams: anything else is warned about and replaced by guaranteed_no_evict.
BATCH_SCHEDULER_POLICIES = {"max_utilization", "guaranteed_no_evict"}
# GetParameter<bool> (model_state.cc): any other string throws, and the caller keeps its default.
BOOL_STRINGS = {"True": True, "true": True, "TRUE": True, "1": True,
                "False": False, "false": False, "FALSE": False, "0": False}
# Parameters the templates of earlier versions of this repository set, which v0.17.0 never reads.
NOT_READ = {"batching_strategy", "decoupled_mode", "max_queue_delay_microseconds", "logits_datatype",
            "FORCE_CPU_ONLY_INPUT_TENSORS"}

# fillTritonResponse (model_instance_state.cc) fails a request whose requested outputs lack either
# ("%s tensor must be present in list of output tensors") and writes them as INT32 of shape
# {1, beams, max_len} and {1, beams}: with max_batch_size > 0 the first dimension is the batch, so
# the config dims are [-1, -1] and [-1] (as backend@v0.17.0:all_models/inflight_batcher_llm/
# tensorrt_llm/config.pbtxt declares them).
REQUIRED_OUTPUTS = {"output_ids": ("TYPE_INT32", [-1, -1]), "sequence_length": ("TYPE_INT32", [-1])}

# Input tensors: (data type, dims, required) as backend@v0.17.0:all_models/inflight_batcher_llm/
# tensorrt_llm/config.pbtxt declares them; the names are InputFieldsNames plus "streaming" and "stop"
# (backend@v0.17.0:inflight_batcher_llm/src/utils.h). request_output_len is required by the backend
# ("request_output_len is not present in the request", utils.cc createRequestsFromInputTensors), and
# so is input_ids for a decoder-only engine ("%s or %s is not present in the request", same place).
UPSTREAM_INPUTS = {
    "input_ids": ("TYPE_INT32", [-1]), "input_lengths": ("TYPE_INT32", [1]),
    "request_output_len": ("TYPE_INT32", [1]), "end_id": ("TYPE_INT32", [1]), "pad_id": ("TYPE_INT32", [1]),
    "stop_words_list": ("TYPE_INT32", [2, -1]), "bad_words_list": ("TYPE_INT32", [2, -1]),
    "runtime_top_k": ("TYPE_INT32", [1]), "runtime_top_p": ("TYPE_FP32", [1]), "temperature": ("TYPE_FP32", [1]),
    "repetition_penalty": ("TYPE_FP32", [1]), "presence_penalty": ("TYPE_FP32", [1]),
    "frequency_penalty": ("TYPE_FP32", [1]), "random_seed": ("TYPE_UINT64", [1]), "streaming": ("TYPE_BOOL", [1]),
    "beam_width": ("TYPE_INT32", [1]), "exclude_input_in_output": ("TYPE_BOOL", [1]), "stop": ("TYPE_BOOL", [1]),
    "min_length": ("TYPE_INT32", [1]), "len_penalty": ("TYPE_FP32", [1]), "num_return_sequences": ("TYPE_INT32", [1]),
}
REQUIRED_INPUTS = {"input_ids", "request_output_len"}


# -- the filled repository --------------------------------------------------------------------------

def fill_gpu(build_root: Path, decoupled: bool, name: str) -> Path:
    profile = load_profile("gpu-trtllm")
    engine.write_engine_config(profile)
    return Path(fill_for_profile(profile, RepoSettings(decoupled_mode=decoupled),
                                 output_dir=build_root / "triton_repo" / name)["repository"])


@pytest.fixture(params=[False, True], ids=["not-decoupled", "decoupled"])
def gpu_repo(request, build_root):
    return fill_gpu(build_root, request.param, f"gpu-{request.param}"), request.param


def dtype(tensor) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.DataType.Name(tensor.data_type)


def parses_as(kind: str, value: str) -> bool:
    """Whether ``value`` is wholly a value of ``kind``. Stricter than the backend on purpose: its
    std::stoi / std::stof take a leading number and drop the rest ("0,9" reads as 0), and throw
    (default kept) where there is none."""
    try:
        if kind == "bool":
            return value in BOOL_STRINGS
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "int_list":  # comma-separated ints (utils::csvStrToVecInt)
            [int(v) for v in value.split(",")]
        return True
    except ValueError:
        return False


def parameters(repo: Path, model: str = "tensorrt_llm") -> dict[str, str]:
    return {k: v.string_value for k, v in read_model_config(repo, model).parameters.items()}


# -- item 9: the tensorrt_llm model's parameters ----------------------------------------------------

def test_tensorrt_llm_sets_only_parameters_the_v0_17_0_backend_reads(gpu_repo):
    repo, _ = gpu_repo
    names = set(parameters(repo))
    assert names <= set(PARAMETERS_READ), f"never read by the backend: {sorted(names - set(PARAMETERS_READ))}"
    assert not names & NOT_READ


def test_gpt_model_type_is_required_and_one_the_backend_accepts(gpu_repo):
    repo, _ = gpu_repo
    assert parameters(repo).get("gpt_model_type") in GPT_MODEL_TYPES


def test_gpt_model_path_is_the_engine_directory(gpu_repo, build_root):
    # Decoder-only: "Both encoder and decoder model paths are empty" otherwise, and the path must
    # exist (model_instance_state.cc, ModelInstanceState constructor).
    repo, _ = gpu_repo
    assert parameters(repo)["gpt_model_path"] == str(load_profile("gpu-trtllm").path("engine_dir"))
    assert "encoder_model_path" not in parameters(repo)


def test_every_parameter_parses_as_the_type_the_backend_converts_it_to(gpu_repo):
    repo, _ = gpu_repo
    bad = {k: v for k, v in parameters(repo).items() if not parses_as(PARAMETERS_READ.get(k, "str"), v)}
    assert not bad, f"the backend would ignore these (warning, default kept): {bad}"


def test_parameter_values_are_in_range(gpu_repo):
    p = parameters(repo := gpu_repo[0])
    # "a number between 0 and 1 ... fraction of GPU memory ... for KV cache"
    # (backend@v0.17.0:docs/model_config.md); 0 would leave no KV cache at all.
    assert 0 < float(p["kv_cache_free_gpu_mem_fraction"]) <= 1
    assert p["batch_scheduler_policy"] in BATCH_SCHEDULER_POLICIES
    assert int(p["max_beam_width"]) == 1  # this tutorial serves greedy / sampled answers, beam 0
    assert BOOL_STRINGS[p["enable_chunked_context"]] is False
    # true: output_ids hold the generated tokens only, as the cpu engine returns them; default false
    assert BOOL_STRINGS[p["exclude_input_in_output"]] is True
    assert "${" not in (repo / "tensorrt_llm" / "config.pbtxt").read_text()


# -- the tensors ---------------------------------------------------------------------------------

def test_outputs_the_backend_writes_are_declared(gpu_repo):
    config = read_model_config(gpu_repo[0], "tensorrt_llm")
    declared = {t.name: (dtype(t), list(t.dims)) for t in config.output}
    for name, spec in REQUIRED_OUTPUTS.items():
        assert declared.get(name) == spec, name


def test_inputs_have_upstream_names_types_and_dims(gpu_repo):
    config = read_model_config(gpu_repo[0], "tensorrt_llm")
    assert config.backend == "tensorrtllm" and config.max_batch_size > 0
    for tensor in config.input:
        assert tensor.name in UPSTREAM_INPUTS, f"{tensor.name} is not an input the backend reads"
        assert (dtype(tensor), list(tensor.dims)) == UPSTREAM_INPUTS[tensor.name], tensor.name
        assert tensor.optional != (tensor.name in REQUIRED_INPUTS | {"input_lengths"}), tensor.name
    # input_ids rows differ in length within a batch: upstream declares allow_ragged_batch
    assert next(t for t in config.input if t.name == "input_ids").allow_ragged_batch


def test_streaming_needs_the_decoupled_policy(gpu_repo):
    # "Streaming is only supported if model is deployed using decoupled mode." and a batch of more
    # than one needs it too (backend@v0.17.0:inflight_batcher_llm/src/utils.cc,
    # createRequestsFromInputTensors); the backend learns it from model_transaction_policy alone
    # (model_state.cc, LoadParameters), so the policy is what must follow the setting.
    repo, decoupled = gpu_repo
    engine_config = read_model_config(repo, "tensorrt_llm")
    assert engine_config.model_transaction_policy.decoupled is decoupled
    streaming = next(t for t in engine_config.input if t.name == "streaming")
    assert streaming.optional and dtype(streaming) == "TYPE_BOOL"
    # the BLS streams only when it is decoupled itself; it must match the engine it calls
    assert read_model_config(repo, "tensorrt_llm_bls").model_transaction_policy.decoupled is decoupled
    ensemble = read_model_config(repo, "ensemble")
    step = next(s for s in ensemble.ensemble_scheduling.step if s.model_name == "tensorrt_llm")
    assert step.input_map["streaming"] == "stream"


# -- the ensemble --------------------------------------------------------------------------------

def test_ensemble_maps_existing_tensors_with_matching_types(gpu_repo):
    repo, _ = gpu_repo
    ensemble = read_model_config(repo, "ensemble")
    produced = {t.name: dtype(t) for t in ensemble.input}  # ensemble tensor -> its data type
    consumers = []
    for step in ensemble.ensemble_scheduling.step:
        model = read_model_config(repo, step.model_name)
        inputs = {t.name: t for t in model.input}
        outputs = {t.name: t for t in model.output}
        assert model.max_batch_size >= ensemble.max_batch_size, step.model_name
        for key, value in step.input_map.items():
            assert key in inputs, f"{step.model_name} has no input {key}"
            consumers.append((step.model_name, key, value, dtype(inputs[key])))
        for name, tensor in inputs.items():
            assert tensor.optional or name in step.input_map, f"{step.model_name} input {name} is required but unmapped"
        for key, value in step.output_map.items():
            assert key in outputs, f"{step.model_name} has no output {key}"
            assert value not in produced, f"{value} is produced twice"
            produced[value] = dtype(outputs[key])
    for model, key, value, wanted in consumers:
        assert value in produced, f"{model}.{key} reads {value}, which nothing produces"
        assert produced[value] == wanted, f"{model}.{key} is {wanted} but {value} is {produced[value]}"
    for tensor in ensemble.output:
        assert produced.get(tensor.name) == dtype(tensor), tensor.name


def test_repository_lints_clean(gpu_repo):
    assert not lint(gpu_repo[0]), lint(gpu_repo[0])


# -- items 10 and 14: the other models of the repository --------------------------------------------

def test_preprocessing_checks_the_engine_build_limits(gpu_repo):
    profile = load_profile("gpu-trtllm")
    p = parameters(gpu_repo[0], "preprocessing")
    assert int(p["max_input_len"]) == int(profile["max_input_len"]) == 1024
    assert int(p["max_model_len"]) == int(profile["max_seq_len"]) == 2048


def test_postprocessing_batches_dynamically_as_upstream(gpu_repo):
    # backend@v0.17.0:all_models/inflight_batcher_llm/postprocessing/config.pbtxt: dynamic_batching {}
    assert read_model_config(gpu_repo[0], "postprocessing").HasField("dynamic_batching")


def test_a_template_that_sets_an_unread_parameter_fails_the_contract(build_root):
    """The check above can fail: the template this repository had before (gpt_model_type
    hard-coded, ${batching_strategy} in a parameter of its own, decoupled_mode,
    max_queue_delay_microseconds and logits_datatype as parameters) is caught."""
    repo = fill_gpu(build_root, False, "old-style")
    path = repo / "tensorrt_llm" / "config.pbtxt"
    extra = ('parameters { key: "batching_strategy" value: { string_value: "inflight_fused_batching" } }\n'
             'parameters { key: "decoupled_mode" value: { string_value: "false" } }\n')
    path.write_text(path.read_text() + extra)
    names = set(parameters(repo))
    assert names - set(PARAMETERS_READ) == {"batching_strategy", "decoupled_mode"}
    path.write_text(re.sub(r'(key: "kv_cache_free_gpu_mem_fraction" value: \{ string_value: ")[^"]*', r"\g<1>0,9",
                           path.read_text()))
    assert not parses_as("float", parameters(repo)["kv_cache_free_gpu_mem_fraction"])
