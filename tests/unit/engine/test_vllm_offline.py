"""One offline vLLM function (scripts/engine/vllm_offline.py) behind run.py and scripts.bench.triton,
checked against a fake ``vllm`` module: both callers go through it, and only ``generate`` is timed."""
import os
import sys
import types

import pytest

from scripts.bench import triton as bench
from scripts.engine import config as engine
from scripts.engine import run, vllm_offline
from scripts.model.tokenizer import decode_ids, load_tokenizer
from scripts.profiles import load_profile

CONFIG = {"engine": "vllm", "model_dir": "/m", "dtype": "bfloat16", "max_model_len": 512, "max_num_seqs": 8,
          "kv_cache_space_gib": 1, "seed": 0, "enforce_eager": True}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_vllm(clock, log):
    """``vllm.LLM`` whose start-up costs 100 s and each generate call 2 s of ``clock``."""
    module = types.ModuleType("vllm")
    llm_module = types.ModuleType("vllm.entrypoints.llm")  # where vllm.LLM finds the EngineArgs it builds

    class EngineArgs:
        pass

    class AsyncEngineArgs(EngineArgs):
        pass

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs):
            log.append(("LLM", kwargs))
            module.args_classes.append(llm_module.EngineArgs)
            clock.now += 100

        def generate(self, prompts, params, use_tqdm=True):
            log.append(("generate", list(prompts), params.kwargs, use_tqdm))
            clock.now += 2
            return [types.SimpleNamespace(
                prompt=p, prompt_token_ids=[0, len(p)],
                outputs=[types.SimpleNamespace(token_ids=[7] * params.kwargs["max_tokens"], text=" x",
                                               finish_reason="length")]) for p in prompts]

    module.LLM, module.SamplingParams, module.EngineArgs, module.AsyncEngineArgs = LLM, SamplingParams, EngineArgs, AsyncEngineArgs
    module.args_classes, module.llm_module, llm_module.EngineArgs = [], llm_module, EngineArgs
    module.entrypoints = types.ModuleType("vllm.entrypoints")
    module.entrypoints.llm = llm_module
    return module


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The tiny Llama's tokenizer, saved where an engine config's ``tokenizer_dir`` can point."""
    from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer

    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(TinyLlamaSpec()).save_pretrained(path)
    return str(path)


@pytest.fixture
def vllm_log(monkeypatch):
    log, clock = [], Clock()
    fake = fake_vllm(clock, log)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.entrypoints", fake.entrypoints)
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.llm", fake.llm_module)
    return log, clock


def test_generate_is_greedy_with_the_engine_configs_settings(vllm_log, monkeypatch):
    log, clock = vllm_log
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    result = vllm_offline.generate(CONFIG, ["a", "bb"], 4, clock=clock)
    assert log[0] == ("LLM", engine.vllm_engine_kwargs(CONFIG))
    assert log[1] == ("generate", ["a", "bb"], {"temperature": 0.0, "max_tokens": 4, "ignore_eos": False}, False)
    assert [o.prompt for o in result.outputs] == ["a", "bb"] and result.generated_tokens == 8
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_only_the_generate_call_is_timed(vllm_log):
    log, clock = vllm_log
    result = vllm_offline.generate(CONFIG, ["a", "b", "c"], 3, ignore_eos=True, warmup_prompts=2, clock=clock)
    assert result.generate_s == 2  # not the engine's 100 s start-up, not the 2 s warm-up
    assert [entry[1] for entry in log if entry[0] == "generate"] == [["a", "b"], ["a", "b", "c"]]


def test_run_py_and_the_benchmark_share_it(vllm_log, monkeypatch, build_root, tokenizer_dir):
    calls = []
    real = vllm_offline.generate

    def spy(config, prompts, max_tokens, **kwargs):
        calls.append((list(prompts), max_tokens, kwargs))
        return real(config, prompts, max_tokens, **kwargs)

    monkeypatch.setattr(vllm_offline, "generate", spy)
    rows = run.generate_vllm(CONFIG | {"tokenizer_dir": tokenizer_dir}, ["Hi"], 5, False)
    assert rows == [{"input_text": "Hi", "input_ids": [0, 2], "output_ids": [7] * 5,
                     "output_text": decode_ids(load_tokenizer(tokenizer_dir), [7] * 5), "finish_reason": "length"}]
    engine_dir = engine.write_engine_config(load_profile("cpu")).parent
    stats = bench.offline_main(str(engine_dir), 3, 4)
    assert calls[0] == (["Hi"], 5, {"ignore_eos": False, "one_at_a_time": False})  # the cpu engine is batch-invariant
    assert calls[1] == (bench.bench_prompts(3), 4, {"ignore_eos": True, "warmup_prompts": 2})
    assert stats["requests"] == 3 and stats["tok_per_s"] > 0
    # CONFIG leaves the start method to vLLM's default (spawn); the cpu profile's engine config forks,
    # with the engine arguments Triton's engine model uses, and vLLM's own class is back afterwards
    fake = sys.modules["vllm"]
    assert fake.args_classes[0] is fake.EngineArgs and load_profile("cpu")["engine_start_method"] == "fork"
    assert issubclass(fake.args_classes[1], fake.EngineArgs) and fake.args_classes[1] is not fake.EngineArgs
    assert fake.llm_module.EngineArgs is fake.EngineArgs


def test_an_engine_that_is_not_batch_invariant_gets_its_reference_prompts_one_at_a_time(vllm_log, tokenizer_dir):
    log, clock = vllm_log
    gpu = engine.engine_settings(load_profile("gpu-vllm"))
    assert gpu["batch_invariant"] is False and "batch_invariant" not in engine.engine_settings(load_profile("cpu"))
    rows = run.generate_vllm(gpu | {"tokenizer_dir": tokenizer_dir}, ["a", "bb", "c"], 2, False)
    assert [entry[1] for entry in log if entry[0] == "generate"] == [["a"], ["bb"], ["c"]]
    assert [r["input_text"] for r in rows] == ["a", "bb", "c"]
    log.clear()
    run.generate_vllm(CONFIG | {"tokenizer_dir": tokenizer_dir}, ["a", "bb"], 2, False)
    assert [entry[1] for entry in log if entry[0] == "generate"] == [["a", "bb"]]


def test_the_reference_text_is_the_ids_decoded_as_every_layer_decodes_them(vllm_log, tokenizer_dir, monkeypatch):
    """vLLM's own text drops a character left unfinished at the end (the H200 reference for 'The
    tokenizer turns' lost 14 stray bytes that way, while the ensemble showed them as U+FFFD): run.py
    stores the one decode the ensemble, the Serve replica and the notebooks' checks use."""
    tokenizer = load_tokenizer(tokenizer_dir)
    continuation = tokenizer("é", add_special_tokens=False)["input_ids"][1]
    ids = tokenizer(" qu", add_special_tokens=False)["input_ids"] + [continuation] * 3
    fake = sys.modules["vllm"]
    monkeypatch.setattr(fake.LLM, "generate", lambda self, prompts, params, use_tqdm=True: [types.SimpleNamespace(
        prompt=p, prompt_token_ids=[0, 5], outputs=[types.SimpleNamespace(token_ids=ids, text=" qu", finish_reason="length")])
        for p in prompts])
    row, = run.generate_vllm(CONFIG | {"tokenizer_dir": tokenizer_dir}, ["The tokenizer turns"], len(ids), False)
    assert row["output_ids"] == ids and row["output_text"] == decode_ids(tokenizer, ids) == " qu" + "\ufffd" * 3
