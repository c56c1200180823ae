"""The text of :class:`scripts.capacity.instance_memory.TritonMemoryEstimate`'s report: per instance
what it needs, the instances loading one after another (or, in parallel, the worst and best case),
and a result line that names the fix. Each function reads an estimate ``e``'s fields and properties
(typed ``Any`` here: the estimate imports this module)."""
from __future__ import annotations

from typing import Any

from scripts.capacity import parallel_loading as parallel
from scripts.capacity.serial_loading import InstanceLoad, load_one_by_one
from scripts.capacity.units import format_bytes

#: The engine's name in the report, and what it calls the fraction.
_ENGINE_NAMES = {"tensorrt_llm": "TensorRT-LLM", "transformers": "transformers", "vllm": "vLLM"}
_FRACTION_NAMES = {"tensorrt_llm": "kv_cache_free_gpu_mem_fraction",
                   "transformers": "max_memory_percent (engine config: kv_cache_free_gpu_mem_fraction)"}
_FRACTION_SETTINGS = {"tensorrt_llm": "kv_cache_free_gpu_mem_fraction",
                      "transformers": "the engine config's kv_cache_free_gpu_mem_fraction (max_memory_percent)"}

_NOT_EVEN_ONE = ("Result: FAIL (not even one instance fits): lower max_batch_size or max_seq_len, use a smaller "
                 "dtype or quantisation, tensor parallelism, or a GPU with more memory")


def format_report(e: Any) -> str:
    """The estimate in words, ending in a ``Result:`` line."""
    return _format_from_free(e) if e.sized_from_free else _format_static(e)


def _format_static(e: Any) -> str:
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
    elif e.starving and e.max_safe_count >= 1:
        lines.append("Result: FAIL (instances that start together starve each other's KV cache): lower "
                     "instance_group count to 1")
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


def _format_from_free(e: Any) -> str:
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
        smallest = load_one_by_one(e.gpu_memory_bytes, e.per_instance_bytes, e.safe_fraction, n)[-1].kv_cache_bytes
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
