"""What one engine instance needs on a GPU: weights, the KV cache of a full batch, activations.

From the engine config (``dtype``, batch and length limits, parallelism) and the model's
``config.json``: weights = parameters x bytes of ``weight_dtype`` (default ``dtype``); the KV cache
a full batch needs = 2 x layers x KV heads x head_dim x ``max_seq_len`` x ``max_batch_size`` x bytes
of ``kv_cache_dtype`` (vLLM's and transformers' names ``max_model_len`` and ``max_num_seqs`` work
too); both divided by tensor x pipeline parallelism; activations/runtime = 10 % of those + 512 MiB.

Engines: ``tensorrt_llm`` and ``transformers`` (continuous batching, :mod:`scripts.engine.transformers_cb`)
size their KV cache when an instance loads, as a fraction of the GPU memory free then, so what must
be free before an instance starts is weights + activations; ``vllm`` reserves all three up front.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from scripts.capacity.units import (CapacityConfigError, format_bytes, is_number, parse_memory, require_mapping,
                                    require_number)
from scripts.engine.config import engine_settings
from scripts.model.configs import LLAMA_SIZE_FIELDS, llama_parameter_count
from scripts.profiles import Profile

#: Activation allowance per instance: this fraction of (weights + full-batch KV cache) ...
ACTIVATION_FRACTION = 0.10
#: ... plus this fixed runtime overhead (cuBLAS/attention workspaces, runtime buffers, CUDA context).
RUNTIME_OVERHEAD_BYTES = 512 * 2**20
ENGINES = ("tensorrt_llm", "vllm", "transformers")
#: Engines whose KV cache takes a fraction of the GPU memory free once the instance has loaded its weights.
FRACTION_OF_FREE_ENGINES = ("tensorrt_llm", "transformers")
DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "fp32": 4, "float": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
    "int4": 0.5, "fp4": 0.5, "nvfp4": 0.5,
}
# The engine_config.json keys the estimate reads, per engine (the rest are paths and build options).
_ESTIMATE_KEYS = {"tensorrt_llm": ("engine", "dtype", "max_batch_size", "max_seq_len", "tp_size", "pp_size"),
                  "vllm": ("engine", "dtype", "max_num_seqs", "max_model_len", "tensor_parallel_size",
                           "gpu_memory_utilization"),
                  # its KV-cache fraction lives in the engine config (TensorRT-LLM's in config.pbtxt)
                  "transformers": ("engine", "dtype", "max_num_seqs", "max_model_len",
                                   "kv_cache_free_gpu_mem_fraction")}


def memory_estimate_settings(profile: Profile) -> dict[str, Any]:
    """The few settings of ``profile``'s engine config (:func:`scripts.engine.config.engine_settings`) that
    the memory estimate reads: the engine, dtype, batch and length limits, parallelism."""
    settings = engine_settings(profile)
    return {key: settings[key] for key in _ESTIMATE_KEYS[settings["engine"]] if key in settings}


def profile_model_config(profile: Profile) -> dict[str, Any]:
    """The ``config.json`` of ``profile``'s model (the estimate's layer and head counts)."""
    return json.loads((profile.path("model_dir") / "config.json").read_text())


@dataclass(frozen=True)
class InstanceSize:
    """What one engine instance needs on one GPU, in bytes."""

    engine: str            # tensorrt_llm | vllm | transformers
    gpu: int               # the GPU's memory (vLLM's reservation is a share of it)
    params: int
    weights: int           # per GPU (divided by tensor x pipeline parallelism)
    kv: int                # what a full batch at full length needs, per GPU
    activations: int
    per_instance: int      # TensorRT-LLM, transformers: weights + activations; vLLM: all three, or its reservation
    notes: tuple[str, ...]


def instance_size(engine_config: Mapping[str, Any], gpu_memory_bytes: int | str,
                  model_config: Mapping[str, Any] | None, num_parameters: int | None = None,
                  activation_fraction: float = ACTIVATION_FRACTION,
                  runtime_overhead_bytes: int = RUNTIME_OVERHEAD_BYTES) -> InstanceSize:
    """One instance's sizes; ``per_instance`` is what must be free before it can start (TensorRT-LLM,
    transformers: weights + activations, its KV cache is sized afterwards) or what it takes (vLLM)."""
    where = "engine config"
    cfg = require_mapping(engine_config, where)
    engine = cfg.get("engine") or "tensorrt_llm"
    if engine not in ENGINES:
        raise CapacityConfigError(f"{where}.engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    gpu_bytes = parse_memory(gpu_memory_bytes, "gpu_memory")
    if gpu_bytes <= 0:
        raise CapacityConfigError("gpu_memory must be more than 0 bytes")
    require_number(activation_fraction, "activation_fraction")
    require_number(runtime_overhead_bytes, "runtime_overhead_bytes")
    if "dtype" not in cfg:
        raise CapacityConfigError(f"{where} lacks 'dtype'")
    dtype = _dtype_bytes(cfg["dtype"], f"{where}.dtype")

    def dtype_or_default(key: str) -> float:  # weight_dtype / kv_cache_dtype: "auto" or absent = dtype
        return dtype if cfg.get(key) in (None, "auto") else _dtype_bytes(cfg[key], f"{where}.{key}")

    weight_dtype, kv_dtype = dtype_or_default("weight_dtype"), dtype_or_default("kv_cache_dtype")
    max_seq_len = _positive_int(cfg, ["max_seq_len", "max_model_len"], where)
    max_batch = _positive_int(cfg, ["max_batch_size", "max_num_seqs"], where)
    parallel = (_positive_int(cfg, ["tp_size", "tensor_parallel_size"], where, default=1)
                * _positive_int(cfg, ["pp_size", "pipeline_parallel_size"], where, default=1))
    if model_config is None:
        raise CapacityConfigError(
            "the KV-cache estimate needs the model's config.json (num_hidden_layers, num_key_value_heads, "
            "head_dim): pass model_config (CLI: --model-config FILE)")
    model = require_mapping(model_config, "model config")
    if num_parameters is None and cfg.get("num_parameters") is not None:
        num_parameters = cfg["num_parameters"]
    if num_parameters is None:  # counted from the model config: check what the count reads, in its order
        for key in LLAMA_SIZE_FIELDS:
            _positive_int(model, [key], "model config")
    layers = _positive_int(model, ["num_hidden_layers"], "model config")
    heads = _positive_int(model, ["num_attention_heads"], "model config")
    kv_heads = _positive_int(model, ["num_key_value_heads"], "model config", default=heads)
    head_dim = _positive_int(model, ["head_dim"], "model config",
                             default=_positive_int(model, ["hidden_size"], "model config") // heads)
    params = (llama_parameter_count(model) if num_parameters is None
              else require_number(num_parameters, "num_parameters", whole=True, minimum=1))

    weights = int(params * weight_dtype / parallel)
    kv = int(2 * layers * kv_heads * head_dim * max_seq_len * max_batch * kv_dtype / parallel)
    activations = int(activation_fraction * (weights + kv) + runtime_overhead_bytes)
    notes = []
    if engine in FRACTION_OF_FREE_ENGINES:  # the KV cache is sized at load time, not part of the fixed need
        per_instance = weights + activations
    else:
        per_instance = weights + kv + activations
        utilization = cfg.get("gpu_memory_utilization")
        if utilization is not None:
            if not is_number(utilization) or not 0 < utilization <= 1:
                raise CapacityConfigError(
                    f"{where}.gpu_memory_utilization must be a number in (0, 1], got {utilization!r}")
            reserved = int(utilization * gpu_bytes)
            if reserved > per_instance:
                notes.append(f"vLLM reserves gpu_memory_utilization={utilization:g} of the GPU per instance "
                             f"({format_bytes(reserved)}), more than the estimate")
                per_instance = reserved
    if parallel > 1:
        notes.append(f"weights and KV cache split over {parallel} GPUs (tensor x pipeline parallel)")
    return InstanceSize(engine, gpu_bytes, params, weights, kv, activations, per_instance, tuple(notes))


def _positive_int(config: Mapping[str, Any], keys: Sequence[str], where: str, default: int | None = None) -> int:
    for key in keys:
        if config.get(key) is not None:
            return require_number(config[key], f"{where}.{key}", whole=True, minimum=1)
    if default is not None:
        return default
    raise CapacityConfigError(f"{where} lacks {' or '.join(map(repr, keys))}")


def _dtype_bytes(name: Any, where: str) -> float:
    if not isinstance(name, str) or name.lower() not in DTYPE_BYTES:
        raise CapacityConfigError(f"{where} must be one of {', '.join(DTYPE_BYTES)}, got {name!r}")
    return DTYPE_BYTES[name.lower()]
