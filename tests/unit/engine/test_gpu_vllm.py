"""The gpu-vllm profile: vLLM's GPU settings travel from the profile through the engine config to the
engine's arguments, ``vllm serve``'s flags and the filled repository, and the cpu profile's stay as they were."""
import dataclasses
import json
from pathlib import Path

import pytest

from scripts.bench.vllm_server import VllmServer
from scripts.engine import config as engine
from scripts.profiles import ProfileError, load_profile
from scripts.triton.backend.engine_stream import instance_gpu_env
from scripts.triton.repository.fill import RepoSettings, fill_for_profile, standalone_arguments
from scripts.triton.repository.lint import lint


def test_gpu_settings_reach_the_engine_arguments_and_vllm_serve(build_root):
    profile = load_profile("gpu-vllm")
    settings = engine.engine_settings(profile)
    assert settings["engine"] == "vllm" and settings["instance_kind"] == "KIND_GPU"
    assert settings["gpu_memory_utilization"] == profile["gpu_memory_utilization"]
    assert settings["enforce_eager"] is False and settings["start_method"] == "auto"
    kwargs = engine.vllm_engine_kwargs(settings)
    assert kwargs["gpu_memory_utilization"] == profile["gpu_memory_utilization"] and "instance_kind" not in kwargs
    argv = VllmServer(settings, profile["served_model_name"]).argv()
    assert argv[argv.index("--gpu-memory-utilization") + 1] == str(profile["gpu_memory_utilization"])
    assert "--no-enforce-eager" in argv


def test_cpu_engine_config_has_no_gpu_keys(build_root):
    settings = engine.engine_settings(load_profile("cpu"))
    assert not {"gpu_memory_utilization", "instance_kind"} & set(settings)
    assert "gpu_memory_utilization" not in engine.vllm_engine_kwargs(settings)


@pytest.mark.parametrize("key, value, message", [("gpu_memory_utilization", 1.5, "less than or equal to 1"),
                                                 ("gpu_memory_utilization", 0.0, "greater than 0"),
                                                 ("instance_kind", "KIND_TPU", "'KIND_CPU' or 'KIND_GPU'")])
def test_bad_gpu_settings_are_refused(build_root, key, value, message):
    with pytest.raises(ProfileError, match=rf"\[gpu-vllm\]: key '{key}': .*{message}"):
        load_profile("gpu-vllm").with_settings(**{key: value})


def test_auto_start_method_leaves_vllms_class_alone():
    pytest.importorskip("vllm")
    from vllm import AsyncEngineArgs, EngineArgs

    assert engine.vllm_engine_args_class("auto") is AsyncEngineArgs
    assert engine.vllm_engine_args_class("auto", offline=True) is EngineArgs


@pytest.mark.parametrize("name, kind", [("cpu", "KIND_CPU"), ("gpu-vllm", "KIND_GPU")])
def test_engine_models_get_the_profiles_instance_kind(build_root, name, kind):
    profile = load_profile(name)
    engine.write_engine_config(profile)
    repo = build_root / "repo"
    fill_for_profile(profile, RepoSettings(engine_instance_count=2), output_dir=repo, models=["vllm_engine", "vllm_model"])
    for model in ("vllm_engine", "vllm_model"):
        assert f"instance_group [ {{ count: 2 kind: {kind} }} ]" in (repo / model / "config.pbtxt").read_text()
    model_json = json.loads((repo / "vllm_model" / "1" / "model.json").read_text())
    assert ("gpu_memory_utilization" in model_json) == (name == "gpu-vllm")
    # two vLLM engines of one model on one GPU starve each other's KV cache: the linter says so, on GPU only
    flagged = [(Path(p.path).parent.name, p.rule) for p in lint(repo)]
    assert flagged == ([("vllm_engine", "vllm-instances"), ("vllm_model", "vllm-instances")] if kind == "KIND_GPU" else [])
    if flagged:
        assert "count: 1" in lint(repo)[0].fix
    one = build_root / "one"
    fill_for_profile(profile, RepoSettings(engine_instance_count=1), output_dir=one, models=["vllm_engine", "vllm_model"])
    assert [p.rule for p in lint(one)] == []


def test_settings_override_the_engine_configs_kind(build_root):
    profile = load_profile("gpu-vllm")
    engine.write_engine_config(profile)
    repo = build_root / "repo"
    fill_for_profile(profile, dataclasses.replace(RepoSettings(), engine_instance_kind="KIND_CPU"), output_dir=repo,
                     models=["vllm_engine"])
    assert "kind: KIND_CPU" in (repo / "vllm_engine" / "config.pbtxt").read_text()


def test_standalone_arguments_keep_the_gpu_share(build_root):
    config = engine.engine_settings(load_profile("gpu-vllm"))
    assert standalone_arguments(config)["gpu_memory_utilization"] == config["gpu_memory_utilization"]


@pytest.mark.parametrize("kind, device, visible, expected", [
    ("CPU", "0", None, {}),
    ("GPU", None, None, {}),
    ("GPU", "1", None, {"CUDA_VISIBLE_DEVICES": "1"}),
    ("GPU", "0", "3", {"CUDA_VISIBLE_DEVICES": "3"}),          # a Ray replica that was given GPU 3
    ("GPU", "1", "4, 6", {"CUDA_VISIBLE_DEVICES": "6"}),
    ("GPU", 0, "GPU-5d2c", {"CUDA_VISIBLE_DEVICES": "GPU-5d2c"}),  # UUIDs pass through
])
def test_an_instance_sees_only_its_gpu(kind, device, visible, expected):
    assert instance_gpu_env(kind, device, visible) == expected


def test_an_instance_outside_the_visible_gpus_is_an_error():
    with pytest.raises(ValueError, match="shows 1 GPU"):
        instance_gpu_env("GPU", "1", "0")


def test_a_version_with_a_shorter_context_gets_a_shorter_max_model_len(build_root, tmp_path):
    config = engine.engine_settings(load_profile("gpu-vllm"))  # max_model_len 2048
    short = tmp_path / "short"
    short.mkdir()
    (short / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    assert standalone_arguments(config, short)["max_model_len"] == 512
    (short / "config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    assert standalone_arguments(config, short)["max_model_len"] == config["max_model_len"]


def test_fork_is_refused_for_a_gpu_engine(build_root):
    with pytest.raises(ProfileError, match=r"\[gpu-vllm\]: engine_start_method 'fork' .*a KIND_GPU engine takes 'auto'"):
        load_profile("gpu-vllm").with_settings(engine_start_method="fork")


def test_without_flashinfer_vllm_samples_with_its_own_sampler(monkeypatch):
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: None)
    assert engine.vllm_environment({})["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: object())
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in engine.vllm_environment({})


def test_the_venv_applies_the_same_rule_and_a_set_value_wins(monkeypatch):
    """scripts.engine.flashinfer_switch.apply: what the GPU host venv's tutorial.pth runs at interpreter start."""
    from scripts.engine import flashinfer_switch

    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: None)
    env = {}
    flashinfer_switch.apply(env)
    assert env == flashinfer_switch.sampler_environment() == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "1"}
    flashinfer_switch.apply(env)
    assert env == {"VLLM_USE_FLASHINFER_SAMPLER": "1"}
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: object())
    env = {}
    flashinfer_switch.apply(env)
    assert env == {}


def test_the_backend_joins_deltas_into_chunks_of_the_interval_after_the_first_token():
    from scripts.triton.backend.engine_stream import ChunkBuffer

    buffer = ChunkBuffer(3)
    got = [buffer.add([i], f"t{i}") for i in range(5)]
    assert got == [([0], "t0"), None, None, ([1, 2, 3], "t1t2t3"), None]  # the first token at once, as vLLM does
    assert buffer.add([5], "t5", finished=True) == ([4, 5], "t4t5") and buffer.flush() is None
    late = ChunkBuffer(3)
    assert late.add([], "") is None and late.add([9, 10], "ab") == ([9, 10], "ab")  # the first tokens, whenever they come
    one = ChunkBuffer(1)
    assert one.add([], "") is None and one.add([7], "x") == ([7], "x")
