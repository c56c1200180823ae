"""Instances that Triton loads in parallel: the worst-case, best-case and in-between verdicts.

The arithmetic and its sources: docs/capacity-estimates.md.
"""
from __future__ import annotations

import math
from typing import Any

from scripts.capacity.units import format_bytes

LOADS, MAY_FAIL, FAILS = "loads", "may fail", "fails"
VERDICTS = (LOADS, MAY_FAIL, FAILS)


def own_engine_kv(gpu_bytes: int, needs: int, fraction: float) -> int:
    """The KV cache of an instance that sees only its own engine loaded: the largest one can get."""
    return max(0, int(fraction * (gpu_bytes - needs)))


def smallest_kv(gpu_bytes: int, needs: int, fraction: float, count: int) -> int:
    """The least KV cache an instance can get when the worst case fits: it measures last, after every
    engine and the other caches (each as large as it can be) are allocated."""
    return max(0, int(fraction * (gpu_bytes - count * needs - (count - 1) * own_engine_kv(gpu_bytes, needs, fraction))))


def worst_case_bytes(gpu_bytes: int, needs: int, fraction: float, count: int) -> int:
    """Every instance sizes its KV cache seeing only its own engine."""
    return count * (needs + own_engine_kv(gpu_bytes, needs, fraction))


def best_case_kv(gpu_bytes: int, needs: int, fraction: float, count: int) -> tuple[int, ...]:
    """The KV caches when every engine loads first and the caches are then sized one after another
    (largest first); empty when the engines alone do not fit."""
    free = gpu_bytes - count * needs
    if free < 0:
        return ()
    caches = []
    for _ in range(count):
        caches.append(int(fraction * free))
        free -= caches[-1]
    return tuple(caches)


def best_case_bytes(gpu_bytes: int, needs: int, fraction: float, count: int) -> int:
    """GPU memory in use in the best case (the engines alone when they do not fit)."""
    return count * needs + sum(best_case_kv(gpu_bytes, needs, fraction, count))


def verdict(gpu_bytes: int, needs: int, fraction: float, count: int) -> str:
    if count * needs > gpu_bytes:
        return FAILS
    return LOADS if worst_case_bytes(gpu_bytes, needs, fraction, count) <= gpu_bytes else MAY_FAIL


def safe_fraction(gpu_bytes: int, needs: int, count: int, at_most: float) -> float | None:
    """The largest fraction (0.01 steps, <= ``at_most``) whose worst case fits; None: none does."""
    for hundredths in range(math.floor(round(at_most * 100, 6)), 0, -1):
        if worst_case_bytes(gpu_bytes, needs, hundredths / 100, count) <= gpu_bytes:
            return hundredths / 100
    return None


def max_count(gpu_bytes: int, needs: int, fraction: float, limit: int) -> int:
    """The most instances whose worst case fits at ``fraction`` (at most ``limit``)."""
    if needs > gpu_bytes:
        return 0
    return min(limit, gpu_bytes // max(1, needs + own_engine_kv(gpu_bytes, needs, fraction)))


def report_lines(e: Any, setting: str, not_even_one: str) -> list[str]:
    """The load-order, worst/best-case and verdict lines of
    :class:`scripts.capacity.instance_memory.TritonMemoryEstimate` ``e`` under parallel loading; ``setting``:
    where to set the fraction, ``not_even_one``: the result line when one engine alone does not fit."""
    f, n, gpu, need = e.kv_cache_free_gpu_mem_fraction, e.total_instances, e.gpu_memory_bytes, e.per_instance_bytes
    own, best = own_engine_kv(gpu, need, f), best_case_kv(gpu, need, f, n)
    worst_total, best_total = worst_case_bytes(gpu, need, f, n), best_case_bytes(gpu, need, f, n)
    sharing = f" x {e.replicas_per_gpu} replicas sharing the GPU = {n} instances" if e.replicas_per_gpu > 1 else ""
    caches = (f"KV cache {format_bytes(best[0])}" if n == 1 else
              f"KV caches from {format_bytes(best[0])} down to {format_bytes(best[-1])}") if best else ""
    lines = [
        f"  instance_group count {e.instance_count}{sharing} on a {format_bytes(gpu)} GPU, loading in parallel "
        "(Triton starts the instances together: what each finds free when it sizes its KV cache depends on timing):",
        f"    worst case, each instance sizing its KV cache with only its own engine loaded: {n} x (engine "
        f"{format_bytes(need)} + KV cache {format_bytes(own)}) = {format_bytes(worst_total)} of {format_bytes(gpu)}: "
        + ("fits" if worst_total <= gpu else "out of memory"),
        "    best case, every engine loaded before any KV cache is sized, the caches then sized one after another: "
        + (f"{n} x engine {format_bytes(need)} + {caches} = {format_bytes(best_total)}: fits" if best else
           f"{n} x engine {format_bytes(need)} = {format_bytes(n * need)} alone: out of memory"),
    ]
    if n > 1 and best:
        failed = e.failed
        lines.append("    one after another (another possible timing): " + (
            f"instance {failed.number} runs out of GPU memory loading its engine" if failed else
            f"all {n} load, KV caches from {format_bytes(e.loads[0].kv_cache_bytes)} down to "
            f"{format_bytes(e.loads[-1].kv_cache_bytes)}"))
    lines.append(f"  largest count that loads whatever the timing at fraction {f:g}: {e.max_safe_count}"
                 + (" per replica" if sharing else ""))
    notes = list(e.notes)
    if e.replicas_per_gpu > 1:
        notes.append(f"the replicas start together too: all {n} instances counted as loading in parallel")
    least = smallest_kv(gpu, need, f, n)
    if e.verdict == LOADS and least < e.kv_cache_bytes:
        notes.append(f"the KV cache sized last can get as little as {format_bytes(least)} (the others taking all they "
                     f"can), less than a full batch needs ({format_bytes(e.kv_cache_bytes)}): that instance then runs "
                     "fewer sequences at full length at once")
    lines += [f"  note: {note}" for note in notes]
    if e.verdict == LOADS:
        lines.append("Result: OK (the instance loads)" if n == 1 else f"Result: OK (all {n} instances load, "
                     "whatever the timing)")
        return lines
    fixes = [f"lower instance_group count to {e.max_safe_count}"] if e.max_safe_count >= 1 else []
    if e.safe_fraction is not None:
        s = e.safe_fraction
        fixes.append(f"set {setting} to {s:g} so all {n} load whatever the timing (each KV cache then between "
                     f"{format_bytes(smallest_kv(gpu, need, s, n))} and {format_bytes(own_engine_kv(gpu, need, s))}; "
                     f"a full batch needs {format_bytes(e.kv_cache_bytes)})")
    if e.replicas_per_gpu > 1 and e.max_safe_count == 0:
        fixes.append("use fewer replicas per GPU")
    if e.verdict == MAY_FAIL:
        lines.append(f"Result: MAY FAIL (whether all {n} load depends on the timing: in the worst case their KV caches "
                     f"take {format_bytes(worst_total - n * need)} of the {format_bytes(gpu - n * need)} their engines "
                     "leave): " + ", or ".join(fixes))
    elif need > gpu:
        lines.append(not_even_one)
    else:
        lines.append(f"Result: FAIL ({n} engines alone need {format_bytes(n * need)} of {format_bytes(gpu)}: no timing "
                     f"and no fraction lets all {n} load): " + ", or ".join(fixes))
    return lines
