"""scripts.triton.memory: TensorRT-LLM instances load one after another, each KV cache taking a
fraction of what is free at that moment; transformers' KV cache is sized the same way, and Triton's
Python backend may load its instances in parallel; vLLM instances reserve a share of the whole GPU."""
import math
import re

import pytest

from scripts.capacity.units import format_bytes
from scripts.model.configs import LLAMA_3_2_1B, llama_parameter_count
from scripts.profiles import load_profile
from scripts.triton.memory import engine_settings, max_safe_instance_count, safe_kv_fraction, triton_instance_memory

GiB = 2**30
MiB = 2**20
# The gpu-trtllm profile's engine: Llama-3.2-1B-Instruct, float16, 4 sequences of 2048 tokens.
ENGINE_1B = {"engine": "tensorrt_llm", "dtype": "float16", "max_batch_size": 4, "max_seq_len": 2048}
# Llama-3.1-8B's config.json (the fields the estimate reads), for an engine too big to load twice.
LLAMA_3_1_8B = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False}
ENGINE_8B = {"engine": "tensorrt_llm", "dtype": "bfloat16", "max_batch_size": 8, "max_seq_len": 4096}


def engine_bytes(params, model, engine):
    """What one instance needs before its KV cache, by the documented rule: weights (2 bytes per
    parameter) + 10 % of (weights + a full batch's KV cache) + 512 MiB."""
    weights = params * 2
    kv = (2 * model["num_hidden_layers"] * model["num_key_value_heads"] * model["head_dim"]
          * engine["max_seq_len"] * engine["max_batch_size"] * 2)
    return weights + int(0.1 * (weights + kv) + 512 * MiB), kv


def free_before(instance, gpu, needs, fraction):
    """Free memory when instance ``instance`` starts: each earlier one left (1 - fraction) of what
    was free after its engine."""
    free = gpu
    for _ in range(instance - 1):
        free = free - needs - int(fraction * (free - needs))
    return free


@pytest.mark.parametrize("engine, model, gpu", [
    (ENGINE_1B, LLAMA_3_2_1B, 24 * GiB),
    (ENGINE_8B, LLAMA_3_1_8B, 80 * GiB),
    (ENGINE_8B, LLAMA_3_1_8B, 24 * GiB),
], ids=["1B-on-24GiB", "8B-on-80GiB", "8B-on-24GiB"])
def test_count_8_at_the_default_fraction_fails_at_instance_2(engine, model, gpu):
    needs, _ = engine_bytes(llama_parameter_count(model), model, engine)
    left = free_before(2, gpu, needs, 0.9)
    assert needs <= gpu and left < needs  # instance 1 loads; what its KV cache leaves cannot hold engine 2
    estimate = triton_instance_memory(engine, 8, gpu, model)
    assert not estimate.fits and not estimate.ok
    first, second = estimate.loads
    assert first.loaded and first.kv_cache_bytes == int(0.9 * (gpu - needs))
    assert (second.number, second.loaded, second.free_before, second.needs_bytes) == (2, False, left, needs)
    assert estimate.failed is second and estimate.max_safe_count == 1
    report = estimate.format_report()
    assert "instance 2 of 8 runs out of GPU memory loading its engine" in report
    assert "instance 1's KV cache took 0.9 of the memory free after its engine loaded" in report
    assert "lower instance_group count to 1" in report


def test_a_small_engine_on_a_large_gpu_fails_one_instance_later():
    # 10 % of 80 GiB still holds a second 1B engine; the third one finds too little.
    gpu = 80 * GiB
    needs, _ = engine_bytes(llama_parameter_count(LLAMA_3_2_1B), LLAMA_3_2_1B, ENGINE_1B)
    assert free_before(2, gpu, needs, 0.9) >= needs > free_before(3, gpu, needs, 0.9)
    estimate = triton_instance_memory(ENGINE_1B, 8, gpu, LLAMA_3_2_1B)
    assert estimate.failed.number == 3 and estimate.max_safe_count == 2
    assert max_safe_instance_count(ENGINE_1B, gpu, LLAMA_3_2_1B) == 2
    assert "the KV caches of instances 1-2 each took 0.9" in estimate.format_report()


@pytest.mark.parametrize("gpu", [24 * GiB, 80 * GiB])
@pytest.mark.parametrize("count", [2, 4, 8])
def test_the_safe_fraction_lets_every_instance_load(count, gpu):
    needs, full_batch = engine_bytes(llama_parameter_count(LLAMA_3_2_1B), LLAMA_3_2_1B, ENGINE_1B)
    fraction = safe_kv_fraction(ENGINE_1B, count, gpu, LLAMA_3_2_1B)
    if count * needs > gpu:  # the engines alone do not fit: no fraction helps
        assert fraction is None
        return
    assert 0 < fraction <= 0.9  # never above the backend's default
    estimate = triton_instance_memory(ENGINE_1B, count, gpu, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=fraction)
    assert estimate.fits and len(estimate.loads) == count and all(load.loaded for load in estimate.loads)
    assert free_before(count, gpu, needs, fraction) >= needs
    assert min(load.kv_cache_bytes for load in estimate.loads) >= full_batch
    if fraction < 0.9:  # one step more, and the last instance either fails or cannot hold a full batch
        more = triton_instance_memory(ENGINE_1B, count, gpu, LLAMA_3_2_1B,
                                      kv_cache_free_gpu_mem_fraction=round(fraction + 0.01, 2))
        assert not more.fits or more.loads[-1].kv_cache_bytes < full_batch
    failing = triton_instance_memory(ENGINE_1B, count, gpu, LLAMA_3_2_1B)
    if not failing.fits:
        assert f"set kv_cache_free_gpu_mem_fraction to {fraction:g} so all {count} load" in failing.format_report()


def test_no_fraction_when_the_engines_alone_do_not_fit():
    needs, _ = engine_bytes(llama_parameter_count(LLAMA_3_2_1B), LLAMA_3_2_1B, ENGINE_1B)
    assert 8 * needs > 24 * GiB
    assert safe_kv_fraction(ENGINE_1B, 8, "24GiB", LLAMA_3_2_1B) is None
    assert "no kv_cache_free_gpu_mem_fraction lets all 8 load" in \
        triton_instance_memory(ENGINE_1B, 8, "24GiB", LLAMA_3_2_1B).format_report()


@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("gpu", ["2GiB", "4GiB", "24GiB", "80GiB"])
def test_count_1_loads_whenever_its_engine_fits(gpu, fraction):
    needs, _ = engine_bytes(llama_parameter_count(LLAMA_3_2_1B), LLAMA_3_2_1B, ENGINE_1B)
    size = int(gpu[:-3]) * GiB
    estimate = triton_instance_memory(ENGINE_1B, 1, gpu, LLAMA_3_2_1B, kv_cache_free_gpu_mem_fraction=fraction)
    assert estimate.fits == (needs <= size)
    if estimate.fits:
        (load,) = estimate.loads
        assert load.kv_cache_bytes == int(fraction * (size - needs)) and estimate.max_safe_count >= 1
        assert estimate.format_report().endswith("Result: OK (the instance loads)")
    else:
        assert estimate.failed.number == 1 and estimate.max_safe_count == 0
        assert "not even one instance fits" in estimate.format_report()


@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.5, 0.9])
def test_replicas_per_gpu_halve_the_budget(fraction):
    # Two Serve replicas with num_gpus: 0.5 each run a Triton: the GPU holds twice the instances.
    kwargs = {"kv_cache_free_gpu_mem_fraction": fraction}
    alone = max_safe_instance_count(ENGINE_1B, "80GiB", LLAMA_3_2_1B, **kwargs)
    shared = max_safe_instance_count(ENGINE_1B, "80GiB", LLAMA_3_2_1B, replicas_per_gpu=2, **kwargs)
    assert shared == alone // 2
    count = max(shared, 1)
    two_replicas = triton_instance_memory(ENGINE_1B, count, "80GiB", LLAMA_3_2_1B, replicas_per_gpu=2, **kwargs)
    one_replica = triton_instance_memory(ENGINE_1B, 2 * count, "80GiB", LLAMA_3_2_1B, **kwargs)
    assert two_replicas.loads == one_replica.loads and two_replicas.fits == (shared >= 1)
    assert f"instance_group count {count} x 2 replicas sharing the GPU = {2 * count} instances" in \
        two_replicas.format_report()


def test_two_replicas_sharing_a_24gib_gpu_need_a_smaller_fraction():
    shared = triton_instance_memory(ENGINE_1B, 1, "24GiB", LLAMA_3_2_1B, replicas_per_gpu=2)
    assert not shared.fits and shared.failed.number == 2 and shared.max_safe_count == 0
    fraction = safe_kv_fraction(ENGINE_1B, 1, "24GiB", LLAMA_3_2_1B, replicas_per_gpu=2)
    assert triton_instance_memory(ENGINE_1B, 1, "24GiB", LLAMA_3_2_1B, replicas_per_gpu=2,
                                  kv_cache_free_gpu_mem_fraction=fraction).fits
    report = shared.format_report()
    assert f"set kv_cache_free_gpu_mem_fraction to {fraction:g} so all 2 load" in report
    assert "use fewer replicas per GPU" in report and "the replicas start together" in report


def test_vllm_reserves_a_share_of_the_whole_gpu():
    engine = {"engine": "vllm", "dtype": "bfloat16", "max_model_len": 512, "max_num_seqs": 64}
    est = triton_instance_memory(engine, 1, 80 * GiB, LLAMA_3_2_1B)
    assert est.kv_cache_bytes == 2 * 16 * 8 * 64 * 512 * 64 * 2 and est.loads == ()
    reserved = triton_instance_memory(dict(engine, gpu_memory_utilization=0.5), 2, 80 * GiB, LLAMA_3_2_1B)
    assert reserved.per_instance_bytes == 40 * GiB and not reserved.fits and reserved.max_safe_count == 1
    assert max_safe_instance_count(engine, "1GiB", LLAMA_3_2_1B) == 0
    assert "not even one instance fits" in triton_instance_memory(engine, 1, "1GiB", LLAMA_3_2_1B).format_report()
    given = triton_instance_memory(engine, 1, 80 * GiB, LLAMA_3_2_1B, num_parameters=10**9)
    assert given.weight_bytes == 2 * 10**9
    with pytest.raises(ValueError, match="for vLLM lower gpu_memory_utilization"):
        safe_kv_fraction(engine, 2, 80 * GiB, LLAMA_3_2_1B)


def test_engine_settings_of_the_gpu_profile():
    settings = engine_settings(load_profile("gpu-trtllm"))
    assert settings["engine"] == "tensorrt_llm" and set(settings) <= {
        "engine", "dtype", "max_batch_size", "max_seq_len", "tp_size", "pp_size"}
    estimate = triton_instance_memory(settings, 1, "24GiB", LLAMA_3_2_1B)
    assert estimate.kv_cache_bytes == engine_bytes(
        llama_parameter_count(LLAMA_3_2_1B), LLAMA_3_2_1B,
        {"max_seq_len": settings["max_seq_len"], "max_batch_size": settings["max_batch_size"]})[1]


FRACTION_RULE = "kv_cache_free_gpu_mem_fraction must be a number above 0 and below 1"


@pytest.mark.parametrize("engine, kwargs, message", [
    (ENGINE_1B, {"instance_count": -1}, "instance_count must be a whole number >= 1, got -1"),
    (ENGINE_1B, {"instance_count": 0}, "instance_count must be a whole number >= 1, got 0"),
    (ENGINE_1B, {"replicas_per_gpu": 0}, "replicas_per_gpu must be a whole number >= 1, got 0"),
    (ENGINE_1B, {"kv_cache_free_gpu_mem_fraction": 0}, FRACTION_RULE),
    (ENGINE_1B, {"kv_cache_free_gpu_mem_fraction": 1.0}, FRACTION_RULE),
    (ENGINE_1B, {"kv_cache_free_gpu_mem_fraction": 1.5}, FRACTION_RULE),
    (ENGINE_1B, {"kv_cache_free_gpu_mem_fraction": -0.1}, FRACTION_RULE),
    (ENGINE_1B, {"kv_cache_free_gpu_mem_fraction": "0.9"}, FRACTION_RULE),
    (ENGINE_1B, {"kv_cache_free_gpu_mem_fraction": math.nan}, FRACTION_RULE),
    (dict(ENGINE_1B, kv_cache_free_gpu_mem_fraction=1.0), {}, "engine config." + FRACTION_RULE),
    (ENGINE_1B, {"parallel_loading": "yes"}, "parallel_loading must be True or False, got 'yes'"),
    (dict(ENGINE_1B, dtype="float64"), {}, "engine config.dtype must be one of"),
    (dict(ENGINE_1B, kv_cache_dtype="fp12"), {}, "engine config.kv_cache_dtype must be one of"),
    (dict(ENGINE_1B, engine="onnx"), {},
     "engine config.engine must be one of tensorrt_llm, vllm, transformers, got 'onnx'"),
    ({"dtype": "float16", "max_seq_len": 2048}, {}, "engine config lacks 'max_batch_size' or 'max_num_seqs'"),
    (dict(ENGINE_1B, max_seq_len=-1), {}, "engine config.max_seq_len must be a whole number >= 1, got -1"),
    (ENGINE_1B, {"gpu_memory_bytes": "24 GB of VRAM"}, "gpu_memory must be a number of bytes >= 0 or a size"),
    (ENGINE_1B, {"model_config": None}, "needs the model's config.json"),
    (ENGINE_1B, {"model_config": {"hidden_size": 8}}, "model config lacks 'vocab_size'"),
])
def test_bad_input_says_what_to_fix(engine, kwargs, message):
    args = {"instance_count": 1, "gpu_memory_bytes": 24 * GiB, "model_config": LLAMA_3_2_1B} | kwargs
    with pytest.raises(ValueError, match=re.escape(message)):
        triton_instance_memory(engine, **args)


# -- transformers (continuous batching in Triton's Python backend) --------------------------------------

GPU_H200 = int(139.8 * GiB)  # what torch reports for an H200


def transformers_engine():
    """The gpu-transformers profile's engine settings: bfloat16, 64 sequences of 2048 tokens, 0.5."""
    return engine_settings(load_profile("gpu-transformers"))


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
