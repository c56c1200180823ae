"""How a vLLM engine inside Triton starts its processes (``engine_start_method``): the setting's way
from the profile into the engine config and ``model.json``, and the engine-args class that applies it."""
from __future__ import annotations

import dataclasses
import os

import pytest

from scripts.engine import config as engine
from scripts.engine.config import VLLM_OWN_KEYS, EngineConfigError, vllm_engine_args_class
from scripts.profiles import load_profile
from scripts.triton.repository.fill import standalone_arguments


def test_the_profiles_start_method_reaches_the_engine_config_and_model_json(build_root):
    profile = load_profile("cpu")
    settings = engine.engine_settings(profile)
    assert settings["start_method"] == profile["engine_start_method"]
    model_json = standalone_arguments(settings)
    assert model_json["start_method"] == settings["start_method"]
    from vllm import AsyncEngineArgs  # noqa: PLC0415

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    # what the backend passes on to vLLM is engine arguments only; the rest is ours
    assert set(model_json) - set(VLLM_OWN_KEYS) <= fields and not set(VLLM_OWN_KEYS) & fields


def test_an_unknown_start_method_is_refused_with_the_choices(build_root):
    with pytest.raises(EngineConfigError, match="'forkserver' is not one of spawn, fork"):
        engine.check_start_method("forkserver")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_choice_is_made_after_vllms_cpu_platform_set_spawn(method, tiny_llama, monkeypatch):
    """vLLM's CPU platform sets spawn while it builds the config; the forking class sets fork after it."""
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork" if method == "spawn" else "spawn")
    args = vllm_engine_args_class(method)(model=str(tiny_llama), dtype="bfloat16", max_model_len=128,
                                          enforce_eager=True)
    args.create_engine_config()
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == method
