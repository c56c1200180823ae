"""GPU memory of Triton model instances: how many ``instance_group`` instances of an engine fit.

How each engine sizes its KV cache, the load order, and the sources: docs/capacity-estimates.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from scripts.capacity import parallel_loading as parallel
from scripts.capacity import serial_loading as serial
from scripts.capacity.instance_memory_report import format_report
from scripts.capacity.instance_size import (ACTIVATION_FRACTION, FRACTION_OF_FREE_ENGINES, RUNTIME_OVERHEAD_BYTES,
                                            instance_size)
from scripts.capacity.serial_loading import InstanceLoad
from scripts.capacity.units import CapacityConfigError, is_number, require_number

#: TensorRT-LLM's default ``kv_cache_free_gpu_mem_fraction`` (KvCacheConfig::kDefaultGpuMemFraction), also
#: transformers' default ``max_memory_percent``.
KV_CACHE_FREE_GPU_MEM_FRACTION = 0.9
#: vLLM: the share of the GPU the instances may reserve together; the rest is headroom for the CUDA
#: context, NCCL and allocator fragmentation.
USABLE_GPU_MEMORY_FRACTION = 0.9
#: Why more than one vLLM instance of a model fails on one GPU, whatever its share (notebook 06, section 9).
VLLM_TOGETHER = ("vLLM instances of one model start together, and each counts the memory the others take while it "
                 "profiles as its own: all but one get a small KV cache or none, whatever gpu_memory_utilization")
#: The most instances a simulation loads (it stops at the first failure long before).
MAX_INSTANCES = 1024
__all__ = ["KV_CACHE_FREE_GPU_MEM_FRACTION", "TritonMemoryEstimate", "max_safe_instance_count", "safe_kv_fraction",
           "triton_instance_memory"]


@dataclass(frozen=True)
class TritonMemoryEstimate:
    """GPU memory of ``instance_count`` Triton instances (x ``replicas_per_gpu``) on one GPU."""

    engine: str
    num_parameters: int
    weight_bytes: int          # per instance, per GPU (divided by tensor/pipeline parallelism)
    kv_cache_bytes: int        # what a full batch at full length needs, per instance, per GPU
    activation_bytes: int      # per instance: fraction of (weights + KV) + fixed runtime overhead
    per_instance_bytes: int    # TensorRT-LLM, transformers: weights + activations; vLLM: the sum (or its reservation)
    instance_count: int
    replicas_per_gpu: int      # Serve replicas sharing the GPU, each with its own Triton
    gpu_memory_bytes: int
    usable_fraction: float     # vLLM
    kv_cache_free_gpu_mem_fraction: float  # TensorRT-LLM; transformers' max_memory_percent
    max_safe_count: int        # per replica, at this fraction (parallel loading: whose worst case fits)
    safe_fraction: float | None = None     # TensorRT-LLM, transformers: see safe_kv_fraction
    loads: tuple[InstanceLoad, ...] = ()   # the instances loading one after another, up to the first failure
    notes: tuple[str, ...] = ()
    parallel_loading: bool = False         # the instances start together (Python backend): see verdict

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_memory_bytes * self.usable_fraction)

    @property
    def total_instances(self) -> int:
        return self.instance_count * self.replicas_per_gpu

    @property
    def sized_from_free(self) -> bool:
        """The KV caches take a fraction of the memory free when they are sized (TensorRT-LLM, transformers)."""
        return self.engine in FRACTION_OF_FREE_ENGINES

    @property
    def failed(self) -> InstanceLoad | None:
        """The instance predicted to run out of memory while loading one after another (None: all load)."""
        return next((load for load in self.loads if not load.loaded), None)

    @property
    def total_bytes(self) -> int:
        """GPU memory in use once the instances have loaded (TensorRT-LLM, transformers: those that load
        one after another)."""
        if self.sized_from_free:
            return sum(load.needs_bytes + load.kv_cache_bytes for load in self.loads if load.loaded)
        return self.per_instance_bytes * self.total_instances

    @property
    def worst_case_bytes(self) -> int:
        """Loading in parallel, every instance sizing its KV cache with only its own engine loaded."""
        return parallel.worst_case_bytes(self.gpu_memory_bytes, self.per_instance_bytes,
                                         self.kv_cache_free_gpu_mem_fraction, self.total_instances)

    @property
    def best_case_bytes(self) -> int:
        """Loading in parallel, every engine loaded before any KV cache is sized, the caches then sized one
        after another (the engines alone when they do not fit)."""
        return parallel.best_case_bytes(self.gpu_memory_bytes, self.per_instance_bytes,
                                        self.kv_cache_free_gpu_mem_fraction, self.total_instances)

    @property
    def starving(self) -> bool:
        """vLLM, instances started together (``parallel_loading``): more than one per Triton starve each
        other's KV cache, since each engine counts the memory the others take while it profiles as its own."""
        return not self.sized_from_free and self.parallel_loading and self.instance_count > 1

    @property
    def verdict(self) -> str:
        """``loads`` or ``fails``; loading in parallel (TensorRT-LLM, transformers) also ``may fail``: the
        worst case does not fit, the best case does, the timing decides."""
        if not self.sized_from_free:
            fits = self.total_bytes <= self.usable_bytes and not self.starving
            return parallel.LOADS if fits else parallel.FAILS
        if self.parallel_loading:
            return parallel.verdict(self.gpu_memory_bytes, self.per_instance_bytes,
                                    self.kv_cache_free_gpu_mem_fraction, self.total_instances)
        return parallel.LOADS if self.failed is None else parallel.FAILS

    @property
    def fits(self) -> bool:
        """The verdict is ``loads`` (loading in parallel: whatever the timing)."""
        return self.verdict == parallel.LOADS

    @property
    def ok(self) -> bool:
        return self.fits

    def format_report(self) -> str:
        return format_report(self)


def triton_instance_memory(engine_config: Mapping[str, Any], instance_count: int, gpu_memory_bytes: int | str,
                           model_config: Mapping[str, Any] | None = None, *, num_parameters: int | None = None,
                           replicas_per_gpu: int = 1,
                           kv_cache_free_gpu_mem_fraction: float | None = None,
                           usable_fraction: float = USABLE_GPU_MEMORY_FRACTION,
                           activation_fraction: float = ACTIVATION_FRACTION,
                           runtime_overhead_bytes: int = RUNTIME_OVERHEAD_BYTES,
                           parallel_loading: bool = False) -> TritonMemoryEstimate:
    """Estimate ``instance_count`` Triton instances of one engine on a GPU of ``gpu_memory_bytes``.

    ``engine_config``: ``engine`` (``tensorrt_llm``, the default, ``vllm`` or ``transformers``),
    ``dtype``, the batch and length limits, optional ``weight_dtype``/``kv_cache_dtype``, parallelism
    and ``num_parameters``; ``model_config``: the model's ``config.json`` (see :mod:`scripts.model.configs`).
    ``replicas_per_gpu``: Serve replicas sharing the GPU (``num_gpus: 0.5`` gives 2), each running
    its own Triton with ``instance_count`` instances. ``kv_cache_free_gpu_mem_fraction`` applies to
    TensorRT-LLM and transformers (its ``max_memory_percent``; None: the engine config's
    ``kv_cache_free_gpu_mem_fraction`` where it has one, else 0.9), ``usable_fraction`` (and the engine
    config's ``gpu_memory_utilization``) to vLLM. ``parallel_loading``: the instances start together,
    as Triton's Python backend starts them (see :attr:`TritonMemoryEstimate.verdict`); then
    ``max_safe_count`` and ``safe_fraction`` are those whose worst case fits.
    """
    sizes = instance_size(engine_config, gpu_memory_bytes, model_config, num_parameters, activation_fraction,
                          runtime_overhead_bytes)
    count = require_number(instance_count, "instance_count", whole=True, minimum=1)
    sharing = require_number(replicas_per_gpu, "replicas_per_gpu", whole=True, minimum=1)
    configured = engine_config.get("kv_cache_free_gpu_mem_fraction")
    if configured is not None:
        configured = _fraction(configured, "engine config.kv_cache_free_gpu_mem_fraction")
    fraction = (_fraction(kv_cache_free_gpu_mem_fraction) if kv_cache_free_gpu_mem_fraction is not None
                else configured if configured is not None else KV_CACHE_FREE_GPU_MEM_FRACTION)
    if not is_number(usable_fraction) or not 0 < usable_fraction <= 1:
        raise CapacityConfigError(f"usable_fraction must be a number in (0, 1], got {usable_fraction!r}")
    if not isinstance(parallel_loading, bool):
        raise CapacityConfigError(f"parallel_loading must be True or False, got {parallel_loading!r}")
    notes = list(sizes.notes)
    if sizes.engine in FRACTION_OF_FREE_ENGINES and configured is not None and configured != fraction:
        notes.append(f"the engine config sets kv_cache_free_gpu_mem_fraction {configured:g}; this estimate uses "
                     f"{fraction:g}")
    if sizes.engine == "transformers" and not parallel_loading and count * sharing > 1:
        notes.append("Triton's Python backend loads the instances in parallel: the order above is one possible "
                     "timing; parallel_loading=True gives the worst case too")
    if sizes.engine not in FRACTION_OF_FREE_ENGINES and parallel_loading and count > 1:
        notes.append(VLLM_TOGETHER)
    common = dict(engine=sizes.engine, num_parameters=sizes.params, weight_bytes=sizes.weights,
                  kv_cache_bytes=sizes.kv, activation_bytes=sizes.activations, per_instance_bytes=sizes.per_instance,
                  instance_count=count, replicas_per_gpu=sharing, gpu_memory_bytes=sizes.gpu,
                  usable_fraction=usable_fraction, kv_cache_free_gpu_mem_fraction=fraction, notes=tuple(notes),
                  parallel_loading=parallel_loading)
    if sizes.engine not in FRACTION_OF_FREE_ENGINES:
        usable = int(sizes.gpu * usable_fraction)
        safe = usable // (sizes.per_instance * sharing)
        if parallel_loading:  # one Triton's instances of a vLLM model start together: see TritonMemoryEstimate.starving
            safe = min(safe, 1)
        return TritonMemoryEstimate(**common, max_safe_count=safe)
    loads = serial.load_one_by_one(sizes.gpu, sizes.per_instance, fraction, count * sharing)
    if parallel_loading:
        loadable = parallel.max_count(sizes.gpu, sizes.per_instance, fraction, MAX_INSTANCES)
        safe = parallel.safe_fraction(sizes.gpu, sizes.per_instance, count * sharing, fraction)
    else:
        loadable = sum(load.loaded for load in serial.load_one_by_one(sizes.gpu, sizes.per_instance, fraction,
                                                                       MAX_INSTANCES))
        safe = serial.safe_fraction(sizes.gpu, sizes.per_instance, count * sharing, fraction, sizes.kv,
                                    reserve=RUNTIME_OVERHEAD_BYTES, slack=ACTIVATION_FRACTION)
    return TritonMemoryEstimate(**common, max_safe_count=loadable // sharing, safe_fraction=safe, loads=loads)


def safe_kv_fraction(engine_config: Mapping[str, Any], instance_count: int, gpu_memory_bytes: int | str,
                     model_config: Mapping[str, Any] | None = None, *,
                     at_most: float = KV_CACHE_FREE_GPU_MEM_FRACTION, parallel_loading: bool = False,
                     **kwargs: Any) -> float | None:
    """The largest ``kv_cache_free_gpu_mem_fraction`` (in steps of 0.01, at most ``at_most``) with
    which all ``instance_count`` x ``replicas_per_gpu`` TensorRT-LLM or transformers instances load,
    each KV cache holding a full batch (``max_batch_size`` sequences of ``max_seq_len``); when no
    fraction gives every instance that much, the largest with which they all load; None when none
    does (their engines alone do not fit). With ``parallel_loading=True``: the largest whose worst
    case fits (each instance seeing only its own engine loaded), None when none does. Arguments as
    for :func:`triton_instance_memory`."""
    estimate = triton_instance_memory(engine_config, instance_count, gpu_memory_bytes, model_config,
                                      kv_cache_free_gpu_mem_fraction=at_most, parallel_loading=parallel_loading,
                                      **kwargs)
    if not estimate.sized_from_free:
        raise CapacityConfigError("safe_kv_fraction is about the kv_cache_free_gpu_mem_fraction of TensorRT-LLM and "
                                  "transformers: for vLLM lower gpu_memory_utilization instead")
    return estimate.safe_fraction


def max_safe_instance_count(engine_config: Mapping[str, Any], gpu_memory_bytes: int | str,
                            model_config: Mapping[str, Any] | None = None, *, parallel_loading: bool = False,
                            **kwargs: Any) -> int:
    """The largest ``instance_group`` count that loads (per replica; 0: not even one); with
    ``parallel_loading=True``, that loads whatever the timing (its worst case fits).

    Same arguments as :func:`triton_instance_memory` (``kv_cache_free_gpu_mem_fraction`` included),
    without ``instance_count``.
    """
    return triton_instance_memory(engine_config, 1, gpu_memory_bytes, model_config, parallel_loading=parallel_loading,
                                  **kwargs).max_safe_count


def _fraction(value: Any, name: str = "kv_cache_free_gpu_mem_fraction") -> float:
    # TensorRT-LLM checks "freeMemFraction (...) must be smaller than 1.0f" when it sizes the KV cache;
    # scripts.engine.transformers_cb.cb_config_kwargs wants it within (0, 1) too.
    if not is_number(value) or not 0 < value < 1:
        raise CapacityConfigError(
            f"{name} must be a number above 0 and below 1 (TensorRT-LLM rejects 1.0), "
            f"got {value!r}: use e.g. 0.9, the backend's default, or a smaller share per instance")
    return value
