"""GPU memory of Triton model instances: how many ``instance_group`` instances of an engine fit.

Each instance of the engine model holds its own weights, activation buffers and KV cache. How the
KV cache is sized decides what happens when several instances share a GPU:

* **TensorRT-LLM** gives each instance's KV cache ``kv_cache_free_gpu_mem_fraction`` (default 0.9)
  of the GPU memory that is *free when that instance has loaded its engine*. Instances load one
  after another, so instance 1 takes 90 % of what is free, instance 2 finds about 10 % left and,
  unless its engine fits there, fails while loading it (``Failed to create instance: unexpected
  error when creating modelInstanceState: [TensorRT-LLM][ERROR] ... out of memory``, as in
  tensorrtllm_backend issue #303) and Triton marks the model UNAVAILABLE.
  :func:`triton_instance_memory` simulates that load order. The fixes: count 1 (one instance
  already batches requests in flight), or a fraction small enough for every instance
  (:func:`safe_kv_fraction`).

  Sources. tensorrtllm_backend v0.17.0: ``all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt``
  declares the parameter ``kv_cache_free_gpu_mem_fraction``; ``inflight_batcher_llm/src/
  model_instance_state.cc`` (``getKvCacheConfigFromParams``) reads it, per model instance, into
  the ``executor::KvCacheConfig`` of that instance's own ``executor::Executor`` (when unset it warns
  "will use default value of 0.9"); ``docs/model_config.md``: the "fraction of GPU memory (after
  loading the model) that may be used for KV cache. (default=0.9)"; ``docs/llama_multi_instance.md``:
  with several instances the memory of each "will depend on the order in which instances are
  loaded". TensorRT-LLM: ``KvCacheConfig``'s free-memory fraction defaults to 0.9
  (``kDefaultGpuMemFraction``; ``cpp/include/tensorrt_llm/executor/executor.h``: "Default is
  90%"); its KV cache manager multiplies the device memory free at that moment by the fraction,
  and rejects a fraction of 1.0 or more.
* **transformers** continuous batching (our Python-backend engine :mod:`scripts.engine.transformers_cb`,
  profile ``gpu-transformers``) sizes its paged KV cache the same way, so it gets the same simulation.
  Its fraction is ``max_memory_percent``; our engine config calls it ``kv_cache_free_gpu_mem_fraction``.

  Sources. transformers 5.19: ``generation/continuous_batching/cache.py``
  (``PagedAttentionCache.get_available_memory``) takes ``total - max(allocated, reserved)`` times
  ``cb_config.max_memory_percent``; ``generation/continuous_batching/requests.py``
  (``get_device_and_memory_breakdown``) computes, on CUDA, ``free, total = torch.cuda.mem_get_info(device)``
  and ``allocated = total - free``: the memory in use on the whole device, other processes' included.
  So the cache takes ``max_memory_percent`` of the memory free on the GPU once the instance's weights
  are loaded (``initialization.py``, ``resolve_max_memory_percent``: 0.9 when unset, 0.8 with logit
  processors). ``scripts/engine/transformers_cb.py`` (``cb_config_kwargs``) passes the engine config's
  ``kv_cache_free_gpu_mem_fraction`` as ``max_memory_percent`` on a GPU.
* **vLLM** reserves ``gpu_memory_utilization`` of the *whole* GPU per instance, so the instances'
  reservations simply add up (a static check against ``usable_fraction`` of the GPU).

**Parallel loading.** Triton loads the instances of a Python-backend model (our transformers engine)
in parallel; then what each instance finds free depends on timing. ``parallel_loading=True`` gives a
three-way :attr:`TritonMemoryEstimate.verdict`: ``loads`` when even the worst case fits (every
instance sizing its KV cache with only its own engine loaded), ``fails`` when even the best case does
not (every engine loaded before any KV cache is sized: only when the engines alone do not fit), ``may
fail`` in between. Sources and the arithmetic: :mod:`scripts.triton.parallel_loading`. The
instances of TensorRT-LLM's backend load one after another (it does not declare parallel loading).

What one instance needs (weights, activations, the KV cache of a full batch) comes from
:mod:`scripts.triton.instance_size`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from scripts.capacity.units import CapacityConfigError, format_bytes, is_number, require_number
from scripts.triton import parallel_loading as parallel
from scripts.triton.instance_size import (ACTIVATION_FRACTION, FRACTION_OF_FREE_ENGINES, RUNTIME_OVERHEAD_BYTES,
                                          engine_settings, instance_size)

#: TensorRT-LLM's default ``kv_cache_free_gpu_mem_fraction`` (KvCacheConfig::kDefaultGpuMemFraction), also
#: transformers' default ``max_memory_percent``.
KV_CACHE_FREE_GPU_MEM_FRACTION = 0.9
#: vLLM: the share of the GPU the instances may reserve together; the rest is headroom for the CUDA
#: context, NCCL and allocator fragmentation.
USABLE_GPU_MEMORY_FRACTION = 0.9
#: The most instances a simulation loads (it stops at the first failure long before).
MAX_INSTANCES = 1024
#: The engine's name in the report, and what it calls the fraction.
_ENGINE_NAMES = {"tensorrt_llm": "TensorRT-LLM", "transformers": "transformers", "vllm": "vLLM"}
_FRACTION_NAMES = {"tensorrt_llm": "kv_cache_free_gpu_mem_fraction",
                   "transformers": "max_memory_percent (engine config: kv_cache_free_gpu_mem_fraction)"}
_FRACTION_SETTINGS = {"tensorrt_llm": "kv_cache_free_gpu_mem_fraction",
                      "transformers": "the engine config's kv_cache_free_gpu_mem_fraction (max_memory_percent)"}
__all__ = ["KV_CACHE_FREE_GPU_MEM_FRACTION", "InstanceLoad", "TritonMemoryEstimate", "engine_settings",
           "max_safe_instance_count", "safe_kv_fraction", "triton_instance_memory"]


@dataclass(frozen=True)
class InstanceLoad:
    """One TensorRT-LLM/transformers instance loading: it needs ``needs_bytes`` free for its engine, then its KV
    cache takes the fraction of what is free after that."""

    number: int            # 1-based, in load order over every instance on the GPU
    free_before: int
    needs_bytes: int       # weights + activations/runtime
    kv_cache_bytes: int    # 0 when it failed
    loaded: bool

    @property
    def free_after(self) -> int:
        return self.free_before - self.needs_bytes - self.kv_cache_bytes if self.loaded else self.free_before


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
    def verdict(self) -> str:
        """``loads`` or ``fails``; loading in parallel (TensorRT-LLM, transformers) also ``may fail``: the
        worst case does not fit, the best case does, the timing decides."""
        if not self.sized_from_free:
            return parallel.LOADS if self.total_bytes <= self.usable_bytes else parallel.FAILS
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
        return _format_from_free(self) if self.sized_from_free else _format_static(self)


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
    common = dict(engine=sizes.engine, num_parameters=sizes.params, weight_bytes=sizes.weights,
                  kv_cache_bytes=sizes.kv, activation_bytes=sizes.activations, per_instance_bytes=sizes.per_instance,
                  instance_count=count, replicas_per_gpu=sharing, gpu_memory_bytes=sizes.gpu,
                  usable_fraction=usable_fraction, kv_cache_free_gpu_mem_fraction=fraction, notes=tuple(notes),
                  parallel_loading=parallel_loading)
    if sizes.engine not in FRACTION_OF_FREE_ENGINES:
        usable = int(sizes.gpu * usable_fraction)
        return TritonMemoryEstimate(**common, max_safe_count=usable // (sizes.per_instance * sharing))
    loads = _load_one_by_one(sizes.gpu, sizes.per_instance, fraction, count * sharing)
    if parallel_loading:
        loadable = parallel.max_count(sizes.gpu, sizes.per_instance, fraction, MAX_INSTANCES)
        safe = parallel.safe_fraction(sizes.gpu, sizes.per_instance, count * sharing, fraction)
    else:
        loadable = sum(load.loaded for load in _load_one_by_one(sizes.gpu, sizes.per_instance, fraction,
                                                                MAX_INSTANCES))
        safe = _safe_fraction(sizes.gpu, sizes.per_instance, count * sharing, fraction, sizes.kv)
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


# -- TensorRT-LLM, transformers: instances load one after another ------------------------------

def _load_one_by_one(gpu_bytes: int, needs: int, fraction: float, count: int) -> tuple[InstanceLoad, ...]:
    """Load ``count`` instances in turn until one does not fit (that one is the last returned)."""
    loads, free = [], gpu_bytes
    for number in range(1, count + 1):
        if needs > free:
            loads.append(InstanceLoad(number, free, needs, 0, False))
            break
        kv = int(fraction * (free - needs))  # the KV cache: the fraction of what is free after the engine
        loads.append(InstanceLoad(number, free, needs, kv, True))
        free -= needs + kv
    return tuple(loads)


def _safe_fraction(gpu_bytes: int, needs: int, count: int, at_most: float, full_batch: int) -> float | None:
    """The largest fraction (0.01 steps, <= ``at_most``) with which ``count`` instances all load, each
    KV cache holding a full batch; failing that, the largest with which they all load; None: none does."""
    loading = []
    for hundredths in range(math.floor(round(at_most * 100, 6)), 0, -1):
        loads = _load_one_by_one(gpu_bytes, needs, hundredths / 100, count)
        if all(load.loaded for load in loads):
            if loads[-1].kv_cache_bytes >= full_batch:  # the last instance's KV cache is the smallest
                return hundredths / 100
            loading.append(hundredths / 100)
    return loading[0] if loading else None


# -- the report -------------------------------------------------------------------------------

_NOT_EVEN_ONE = ("Result: FAIL (not even one instance fits): lower max_batch_size or max_seq_len, use a smaller "
                 "dtype or quantisation, tensor parallelism, or a GPU with more memory")


def _format_static(e: TritonMemoryEstimate) -> str:
    sharing = f" x {e.replicas_per_gpu} replicas sharing the GPU" if e.replicas_per_gpu > 1 else ""
    estimate = e.weight_bytes + e.kv_cache_bytes + e.activation_bytes
    lines = [
        f"Triton instance memory ({e.num_parameters / 1e9:.3g} B parameters):",
        f"  per instance: weights {format_bytes(e.weight_bytes)} + KV cache {format_bytes(e.kv_cache_bytes)}"
        f" + activations/runtime {format_bytes(e.activation_bytes)} = {format_bytes(estimate)}"
        + (f" (reserves {format_bytes(e.per_instance_bytes)})" if e.per_instance_bytes > estimate else ""),
        f"  instance_group count {e.instance_count}{sharing}: {format_bytes(e.total_bytes)} of "
        f"{format_bytes(e.usable_bytes)} usable ({e.usable_fraction:.0%} of {format_bytes(e.gpu_memory_bytes)})",
        f"  largest safe count: {e.max_safe_count}",
    ]
    lines += [f"  note: {n}" for n in e.notes]
    if e.fits:
        lines.append("Result: OK (the instances fit in GPU memory)")
    elif e.max_safe_count >= 1:
        lines.append(f"Result: FAIL (out of GPU memory at load): lower instance_group count to {e.max_safe_count}")
    else:
        lines.append(_NOT_EVEN_ONE + (", or fewer replicas per GPU" if e.replicas_per_gpu > 1 else ""))
    return "\n".join(lines)


def _format_load(load: InstanceLoad) -> str:
    if load.loaded:
        return (f"    instance {load.number}: {format_bytes(load.free_before)} free: engine "
                f"{format_bytes(load.needs_bytes)} + KV cache {format_bytes(load.kv_cache_bytes)}, "
                f"{format_bytes(load.free_after)} left")
    return (f"    instance {load.number}: {format_bytes(load.free_before)} free, its engine needs "
            f"{format_bytes(load.needs_bytes)}: out of memory")


def _format_from_free(e: TritonMemoryEstimate) -> str:
    f, n = e.kv_cache_free_gpu_mem_fraction, e.total_instances
    name, setting = _FRACTION_NAMES[e.engine], _FRACTION_SETTINGS[e.engine]
    head = [
        f"Triton instance memory, {_ENGINE_NAMES[e.engine]} ({e.num_parameters / 1e9:.3g} B parameters):",
        f"  each instance loads its engine: weights {format_bytes(e.weight_bytes)} + activations/runtime "
        f"{format_bytes(e.activation_bytes)} = {format_bytes(e.per_instance_bytes)}",
        f"  then its KV cache takes {name} {f:g} of the GPU memory still free "
        f"(a full batch needs {format_bytes(e.kv_cache_bytes)})",
    ]
    if e.parallel_loading:
        return "\n".join(head + parallel.report_lines(e, setting, _NOT_EVEN_ONE))
    sharing = f" x {e.replicas_per_gpu} replicas sharing the GPU = {n} instances" if e.replicas_per_gpu > 1 else ""
    loads = [_format_load(load) for load in e.loads]
    if len(loads) > 8:
        loads[3:-2] = [f"    ... instances 4-{len(loads) - 2} the same way, each KV cache smaller than the last"]
    lines = [
        *head,
        f"  instance_group count {e.instance_count}{sharing} on a {format_bytes(e.gpu_memory_bytes)} GPU"
        + (", loading one after another:" if n > 1 else ":"),
        *loads,
        f"  largest safe count at fraction {f:g}: {e.max_safe_count}" + (" per replica" if sharing else ""),
    ]
    notes = list(e.notes)
    if e.replicas_per_gpu > 1:
        notes.append("the replicas start together: two instances that size their KV caches at the same moment both "
                     f"take {f:g} of the same free memory, so the order above is the best case")
    if e.fits and e.loads[-1].kv_cache_bytes < e.kv_cache_bytes:
        notes.append(f"instance {n}'s KV cache ({format_bytes(e.loads[-1].kv_cache_bytes)}) is smaller than a full "
                     "batch needs: it runs fewer sequences at full length at once")
    lines += [f"  note: {note}" for note in notes]
    failed = e.failed
    if failed is None:
        lines.append("Result: OK (the instance loads)" if n == 1 else f"Result: OK (all {n} instances load)")
        return "\n".join(lines)
    if failed.number == 1:
        lines.append(_NOT_EVEN_ONE)
        return "\n".join(lines)
    before = ("instance 1's KV cache took" if failed.number == 2
              else f"the KV caches of instances 1-{failed.number - 1} each took")
    engines = "its engine" if failed.number == 2 else "their engines"
    fixes = [f"lower instance_group count to {e.max_safe_count}"] if e.max_safe_count >= 1 else []
    if e.safe_fraction is not None:
        smallest = _load_one_by_one(e.gpu_memory_bytes, e.per_instance_bytes, e.safe_fraction, n)[-1].kv_cache_bytes
        fixes.append(f"set {setting} to {e.safe_fraction:g} so all {n} load (the smallest "
                     f"KV cache then {format_bytes(smallest)}; a full batch needs {format_bytes(e.kv_cache_bytes)})")
    else:
        lines.append(f"  no {setting} lets all {n} load: {n} engines alone need "
                     f"{format_bytes(n * e.per_instance_bytes)} of {format_bytes(e.gpu_memory_bytes)}")
    if e.replicas_per_gpu > 1 and e.max_safe_count == 0:
        fixes.append("use fewer replicas per GPU")
    lines.append(f"Result: FAIL (instance {failed.number} of {n} runs out of GPU memory loading its engine: "
                 f"{before} {f:g} of the memory free after {engines} loaded): " + ", or ".join(fixes))
    return "\n".join(lines)
