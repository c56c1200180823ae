"""scripts.capacity.instance_memory for transformers (continuous batching in Triton's Python backend): its
KV cache is sized like TensorRT-LLM's, and Triton may load its instances in parallel
(scripts.capacity.parallel_loading), which gives a third verdict, ``may fail``."""
import math

import pytest

from memory_builders import ENGINE_1B, ENGINE_8B, GiB, engine_bytes, free_before
from scripts.capacity.instance_memory import max_safe_instance_count, safe_kv_fraction, triton_instance_memory
from scripts.capacity.instance_size import memory_estimate_settings
from scripts.capacity.units import format_bytes
from scripts.model.configs import LLAMA_3_1_8B, LLAMA_3_2_1B, llama_parameter_count
from scripts.profiles import load_profile

GPU_H200 = int(139.8 * GiB)  # what torch reports for an H200


def transformers_engine():
    """The gpu-transformers profile's engine settings: bfloat16, 64 sequences of 2048 tokens, 0.5."""
    return memory_estimate_settings(load_profile("gpu-transformers"))


def transformers_need():
    engine = transformers_engine()
    return engine_bytes(llama_parameter_count(LLAMA_3_2_1B), LLAMA_3_2_1B,
                        {"max_seq_len": engine["max_model_len"], "max_batch_size": engine["max_num_seqs"]})


def worst_case(count, gpu, needs, fraction):
    """Loading in parallel, each instance sizing its KV cache with only its own engine loaded."""
    return count * needs + count * int(fraction * (gpu - needs))


def test_transformers_sizes_from_the_gpu_transformers_profile():
    engine = transformers_engine()
    assert engine["engine"] == "transformers" and set(engine) <= {
        "engine", "dtype", "max_num_seqs", "max_model_len", "kv_cache_free_gpu_mem_fraction"}
    assert (engine["dtype"], engine["max_num_seqs"], engine["max_model_len"]) == ("bfloat16", 64, 2048)
    needs, full_batch = transformers_need()
    estimate = triton_instance_memory(engine, 1, GPU_H200, LLAMA_3_2_1B)
    assert estimate.engine == "transformers" and estimate.weight_bytes == 2 * 1_235_814_400
    assert estimate.kv_cache_bytes == full_batch == 2 * 16 * 8 * 64 * 2048 * 64 * 2 == 4 * GiB
    # like TensorRT-LLM: the KV cache is not part of what must be free before the instance starts
    assert estimate.per_instance_bytes == needs == estimate.weight_bytes + estimate.activation_bytes
    # the fraction defaults to the engine config's (the engine passes it as max_memory_percent)
    assert estimate.kv_cache_free_gpu_mem_fraction == engine["kv_cache_free_gpu_mem_fraction"] == 0.5
    (load,) = estimate.loads
    assert load.kv_cache_bytes == int(0.5 * (GPU_H200 - needs)) and estimate.verdict == "loads"


def test_transformers_loads_one_after_another_like_tensorrt_llm():
    engine = transformers_engine()
    same_as_trtllm = {"engine": "tensorrt_llm", "dtype": "bfloat16", "max_batch_size": 64, "max_seq_len": 2048}
    for count in (1, 2, 8):
        ours = triton_instance_memory(engine, count, GPU_H200, LLAMA_3_2_1B)
        trtllm = triton_instance_memory(same_as_trtllm, count, GPU_H200, LLAMA_3_2_1B,
                                        kv_cache_free_gpu_mem_fraction=0.5)
        assert (ours.loads, ours.max_safe_count, ours.safe_fraction) == \
            (trtllm.loads, trtllm.max_safe_count, trtllm.safe_fraction)
    needs, _ = transformers_need()
    assert free_before(5, GPU_H200, needs, 0.5) >= needs > free_before(6, GPU_H200, needs, 0.5)
    estimate = triton_instance_memory(engine, 8, GPU_H200, LLAMA_3_2_1B)
    assert estimate.failed.number == 6 and estimate.verdict == "fails" and estimate.max_safe_count == 5
    report = estimate.format_report()
    assert report.startswith("Triton instance memory, transformers (") and "TensorRT-LLM" not in report
    assert "max_memory_percent (engine config: kv_cache_free_gpu_mem_fraction) 0.5" in report
    assert "set the engine config's kv_cache_free_gpu_mem_fraction (max_memory_percent) to" in report
    assert "Triton's Python backend loads the instances in parallel" in report
    other = triton_instance_memory(engine, 1, GPU_H200, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=0.9)
    assert other.kv_cache_free_gpu_mem_fraction == 0.9
    assert "the engine config sets kv_cache_free_gpu_mem_fraction 0.5; this estimate uses 0.9" in other.format_report()


@pytest.mark.parametrize("count, fraction, verdict", [
    (1, 0.5, "loads"), (1, 0.99, "loads"),
    (2, 0.5, "may fail"),  # 2 x (3.4 GiB + 68.2 GiB) > 139.8 GiB, yet the engines alone fit
    (2, 0.45, "loads"),
    (8, 0.5, "may fail"), (8, 0.9, "may fail"),  # one after another fails at instance 6 / 2: one timing
    (8, 0.1, "loads"), (8, 0.11, "may fail"),
    (40, 0.5, "may fail"),  # 40 engines fit (137.3 GiB) ...
    (41, 0.5, "fails"), (41, 0.01, "fails"),  # ... 41 do not: no timing or fraction helps
])
def test_parallel_loading_verdicts_on_an_h200(count, fraction, verdict):
    needs, _ = transformers_need()
    worst = worst_case(count, GPU_H200, needs, fraction)
    expected = "fails" if count * needs > GPU_H200 else "loads" if worst <= GPU_H200 else "may fail"
    assert expected == verdict
    estimate = triton_instance_memory(transformers_engine(), count, GPU_H200, LLAMA_3_2_1B,
                                      kv_cache_free_gpu_mem_fraction=fraction, parallel_loading=True)
    assert estimate.verdict == verdict and estimate.fits == (verdict == "loads") and estimate.ok == estimate.fits
    assert estimate.worst_case_bytes == worst
    assert estimate.best_case_bytes <= GPU_H200 or verdict == "fails"
    sequential = triton_instance_memory(transformers_engine(), count, GPU_H200, LLAMA_3_2_1B,
                                        kv_cache_free_gpu_mem_fraction=fraction)
    assert sequential.verdict in ("loads", "fails") and sequential.fits == (sequential.failed is None)
    if verdict == "loads":  # what loads whatever the timing loads one after another too
        assert sequential.fits
    if sequential.verdict == "fails" and verdict != "fails":
        assert verdict == "may fail"


def test_the_worst_case_boundary_is_exact():
    needs, _ = transformers_need()
    count, fraction = 8, 0.1
    # N need + N f (G - need) <= G  <=>  G >= N need (1 - f) / (1 - N f)
    edge = math.ceil(count * needs * (1 - fraction) / (1 - count * fraction))
    seen = set()
    for gpu in range(edge - 4 * count, edge + 4 * count):
        estimate = triton_instance_memory(transformers_engine(), count, gpu, LLAMA_3_2_1B,
                                          kv_cache_free_gpu_mem_fraction=fraction, parallel_loading=True)
        expected = "loads" if worst_case(count, gpu, needs, fraction) <= gpu else "may fail"
        assert estimate.verdict == expected
        seen.add(expected)
    assert seen == {"loads", "may fail"}
    # the best case: the engines alone fitting exactly still loads in the best case; one byte less fails
    for gpu, verdict in [(count * needs, "may fail"), (count * needs - 1, "fails")]:
        estimate = triton_instance_memory(transformers_engine(), count, gpu, LLAMA_3_2_1B,
                                          kv_cache_free_gpu_mem_fraction=fraction, parallel_loading=True)
        assert estimate.verdict == verdict


@pytest.mark.parametrize("count", [1, 2, 4, 8, 16, 40, 41])
def test_the_parallel_safe_fraction_is_the_largest_whose_worst_case_fits(count):
    needs, _ = transformers_need()
    engine = transformers_engine()
    fraction = safe_kv_fraction(engine, count, GPU_H200, LLAMA_3_2_1B, parallel_loading=True)
    if worst_case(count, GPU_H200, needs, 0.01) > GPU_H200:
        assert fraction is None and (count * needs > GPU_H200) == (count == 41)
        return
    assert 0 < fraction <= 0.9 and count * fraction < 1  # N caches of f (GPU - need) fit only when N f < 1
    assert worst_case(count, GPU_H200, needs, fraction) <= GPU_H200
    if fraction < 0.9:
        assert worst_case(count, GPU_H200, needs, round(fraction + 0.01, 2)) > GPU_H200
    estimate = triton_instance_memory(engine, count, GPU_H200, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=fraction,
                                      parallel_loading=True)
    assert estimate.verdict == "loads" and estimate.safe_fraction == fraction
    assert safe_kv_fraction(engine, count, GPU_H200, LLAMA_3_2_1B, parallel_loading=True, at_most=fraction / 2) \
        <= fraction / 2
    # a parallel-safe fraction is never above the one-after-another one
    assert fraction <= safe_kv_fraction(engine, count, GPU_H200, LLAMA_3_2_1B)


def test_max_safe_count_with_and_without_parallel_loading():
    needs, _ = transformers_need()
    engine = transformers_engine()
    for fraction in (0.05, 0.1, 0.2, 0.5, 0.9):
        parallel = max_safe_instance_count(engine, GPU_H200, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=fraction,
                                           parallel_loading=True)
        assert parallel == GPU_H200 // (needs + int(fraction * (GPU_H200 - needs)))
        assert worst_case(parallel, GPU_H200, needs, fraction) <= GPU_H200 < \
            worst_case(parallel + 1, GPU_H200, needs, fraction)
        assert triton_instance_memory(engine, parallel, GPU_H200, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=fraction,
                                      parallel_loading=True).verdict == "loads"
        assert triton_instance_memory(engine, parallel + 1, GPU_H200, LLAMA_3_2_1B,
                                      kv_cache_free_gpu_mem_fraction=fraction, parallel_loading=True).verdict != "loads"
        sequential = max_safe_instance_count(engine, GPU_H200, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=fraction)
        assert parallel <= sequential
    # at the profile's 0.5: one instance whatever the timing, five one after another
    assert max_safe_instance_count(engine, GPU_H200, LLAMA_3_2_1B, parallel_loading=True) == 1
    assert max_safe_instance_count(engine, GPU_H200, LLAMA_3_2_1B) == 5
    assert max_safe_instance_count(engine, "2GiB", LLAMA_3_2_1B, parallel_loading=True) == 0


def test_the_parallel_report_states_the_order_the_cases_and_the_fix():
    engine = transformers_engine()
    needs, _ = transformers_need()
    may_fail = triton_instance_memory(engine, 8, GPU_H200, LLAMA_3_2_1B, parallel_loading=True)
    safe = safe_kv_fraction(engine, 8, GPU_H200, LLAMA_3_2_1B, parallel_loading=True)
    report = may_fail.format_report()
    assert "instance_group count 8 on a 139.8 GiB GPU, loading in parallel" in report
    assert ("worst case, each instance sizing its KV cache with only its own engine loaded: 8 x (engine "
            f"{format_bytes(needs)} + KV cache {format_bytes(int(0.5 * (GPU_H200 - needs)))}) = "
            f"{format_bytes(worst_case(8, GPU_H200, needs, 0.5))} of 139.8 GiB: out of memory") in report
    assert "best case, every engine loaded before any KV cache is sized" in report
    assert f"= {format_bytes(may_fail.best_case_bytes)}: fits" in report
    assert "one after another (another possible timing): instance 6 runs out of GPU memory loading its engine" in report
    assert "Result: MAY FAIL (whether all 8 load depends on the timing" in report
    assert "lower instance_group count to 1" in report
    assert (f"set the engine config's kv_cache_free_gpu_mem_fraction (max_memory_percent) to {safe:g} so all 8 load "
            "whatever the timing") in report
    loads = triton_instance_memory(engine, 8, GPU_H200, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=safe,
                                   parallel_loading=True).format_report()
    assert loads.endswith("Result: OK (all 8 instances load, whatever the timing)")
    assert ": fits" in loads and "the KV cache sized last can get as little as" in loads
    fails = triton_instance_memory(engine, 41, GPU_H200, LLAMA_3_2_1B, parallel_loading=True).format_report()
    assert (f"Result: FAIL (41 engines alone need {format_bytes(41 * needs)} of 139.8 GiB: no timing and no fraction "
            "lets all 41 load): lower instance_group count to 1") in fails
    assert "alone: out of memory" in fails
    assert "not even one instance fits" in triton_instance_memory(engine, 1, "2GiB", LLAMA_3_2_1B,
                                                                  parallel_loading=True).format_report()
    shared = triton_instance_memory(engine, 1, GPU_H200, LLAMA_3_2_1B, replicas_per_gpu=2, parallel_loading=True)
    assert shared.verdict == "may fail" and "all 2 instances counted as loading in parallel" in shared.format_report()
    assert "use fewer replicas per GPU" in shared.format_report()


def test_parallel_loading_off_changes_nothing():
    for engine, gpu, kwargs in [(ENGINE_1B, "24GiB", {}), (ENGINE_1B, "80GiB", {"replicas_per_gpu": 2}),
                                (ENGINE_8B, "80GiB", {"kv_cache_free_gpu_mem_fraction": 0.3})]:
        model = LLAMA_3_1_8B if engine is ENGINE_8B else LLAMA_3_2_1B
        default = triton_instance_memory(engine, 4, gpu, model, **kwargs)
        assert triton_instance_memory(engine, 4, gpu, model, parallel_loading=False, **kwargs) == default
        assert default.verdict == ("loads" if default.failed is None else "fails")
        sharing = {k: v for k, v in kwargs.items() if k == "replicas_per_gpu"}
        assert safe_kv_fraction(engine, 4, gpu, model, parallel_loading=False, **sharing) == \
            safe_kv_fraction(engine, 4, gpu, model, **sharing)
        assert max_safe_instance_count(engine, gpu, model, parallel_loading=False, **kwargs) == \
            max_safe_instance_count(engine, gpu, model, **kwargs)
    # TensorRT-LLM's backend loads one after another, but the arithmetic is the engine's, not the backend's
    assert triton_instance_memory(ENGINE_1B, 8, "80GiB", LLAMA_3_2_1B, parallel_loading=True).verdict == "may fail"
    vllm = {"engine": "vllm", "dtype": "bfloat16", "max_model_len": 512, "max_num_seqs": 64}
    for count, verdict in [(1, "loads"), (1000, "fails")]:
        for parallel in (False, True):
            assert triton_instance_memory(vllm, count, 80 * GiB, LLAMA_3_2_1B,
                                          parallel_loading=parallel).verdict == verdict
