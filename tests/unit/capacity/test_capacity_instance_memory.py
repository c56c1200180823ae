"""scripts.capacity.instance_memory: TensorRT-LLM instances load one after another, each KV cache taking
a fraction of what is free at that moment; vLLM instances reserve a share of the whole GPU. (transformers,
sized the same way and loaded in parallel by Triton's Python backend: test_capacity_transformers_memory.)"""
import math
import re

import pytest

from memory_builders import ENGINE_1B, ENGINE_8B, GiB, engine_bytes, free_before
from scripts.capacity.instance_memory import max_safe_instance_count, safe_kv_fraction, triton_instance_memory
from scripts.capacity.instance_size import memory_estimate_settings
from scripts.model.configs import LLAMA_3_1_8B, LLAMA_3_2_1B, llama_parameter_count
from scripts.profiles import load_profile

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


def test_vllm_instances_started_together_starve_whatever_their_share():
    # An H200 showed it at count 2: 0.12 each (KV caches of 358,864 and 104,064 tokens) and 0.9 (3,932,032 and
    # 104,640): the later engine counted the earlier one's memory as its own (notebook 06, section 9).
    small = {"engine": "vllm", "dtype": "bfloat16", "max_model_len": 512, "max_num_seqs": 64, "gpu_memory_utilization": 0.12}
    alone = triton_instance_memory(small, 2, 80 * GiB, LLAMA_3_2_1B)
    assert alone.fits and not alone.starving and alone.max_safe_count == 7  # the reservations alone add up
    together = triton_instance_memory(small, 2, 80 * GiB, LLAMA_3_2_1B, parallel_loading=True)
    assert together.starving and not together.fits and together.verdict == "fails" and together.max_safe_count == 1
    report = together.format_report()
    assert "start together" in report and report.endswith(
        "Result: FAIL (instances that start together starve each other's KV cache): lower instance_group count to 1")
    one = triton_instance_memory(small, 1, 80 * GiB, LLAMA_3_2_1B, parallel_loading=True)
    assert one.fits and not one.starving and "start together" not in one.format_report()
    # two replicas, each its own Triton with one instance: a static sum, as before
    assert triton_instance_memory(small, 1, 80 * GiB, LLAMA_3_2_1B, replicas_per_gpu=2, parallel_loading=True).fits


def test_memory_estimate_settings_of_the_gpu_profile():
    settings = memory_estimate_settings(load_profile("gpu-trtllm"))
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


def test_the_fallback_fraction_leaves_the_last_instance_room_for_the_estimates_error():
    # notebook 06 section 9 on an 80 GB H100, gpu-trtllm's engine, eight instances: no fraction gives the
    # eighth a full batch, and the largest that merely loads (0.22) left it about 0.5 GiB beyond its engine.
    from scripts.capacity import serial_loading as serial
    from scripts.capacity.instance_size import ACTIVATION_FRACTION, RUNTIME_OVERHEAD_BYTES

    h100 = 81_559 * 2**20
    settings = memory_estimate_settings(load_profile("gpu-trtllm"))
    fraction = safe_kv_fraction(settings, 8, h100, LLAMA_3_2_1B)
    estimate = triton_instance_memory(settings, 8, h100, LLAMA_3_2_1B)
    needs = estimate.per_instance_bytes
    assert serial.load_one_by_one(h100, needs, 0.22, 8)[-1].loaded  # the old answer: loads on paper only
    assert fraction is not None and fraction < 0.22
    # the server's context taken once, each engine a tenth above its estimate: every instance still loads
    worse = serial.load_one_by_one(h100 - RUNTIME_OVERHEAD_BYTES, int(needs * (1 + ACTIVATION_FRACTION)), fraction, 8)
    assert all(load.loaded for load in worse)
    # where a full batch fits every instance, nothing changes (an H200)
    h200 = 143_771 * 2**20
    assert safe_kv_fraction(settings, 8, h200, LLAMA_3_2_1B) == pytest.approx(0.16)
