"""Notebook 07's larger-model point: the same engine settings and the same serving path, another
model (:mod:`scripts.model.larger_llama`), measured against ``vllm serve`` of that model.

:func:`prepare_larger` makes what the point serves: the model (once), its ``engine_config.json``
in an engine directory of its own, and a Serve model repository filled from it. The notebook then
starts ``vllm serve`` and a Triton on them and points a Serve application at that Triton, as it
did for the tiny model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.engine.config import write_engine_config
from scripts.model.larger_llama import LargerLlamaSpec, make_larger_llama
from scripts.paths import triton_repo_dir
from scripts.profiles import Profile
from scripts.serve.config import fill_serve_repository

MODEL_DIR = "models/larger-llama"
ENGINE_DIR = "engine/vllm-larger"
SERVED_NAME = "larger-llama"


def skip_reason(profile: Profile, smoke: bool, wanted: bool = True) -> str | None:
    """Why notebook 07 does not measure the larger model (None: it does). The point exists for a CPU
    profile, whose tiny model makes a token nearly free; a GPU profile serves a real-sized model already."""
    if smoke:
        return "SMOKE (make bench measures the larger model)"
    if not wanted:
        return "LARGER_MODEL is False"
    if not profile["logical_gpus"]:
        return f"profile {profile.name!r} serves a model of real size on a real GPU already"
    return None


def larger_profile(profile: Profile) -> Profile:
    """``profile`` with the larger model: its own model and engine directories and served name;
    every engine setting (dtype, max_model_len, max_num_seqs, KV cache) stays the profile's."""
    if profile.engine != "vllm":
        raise ValueError(f"the larger-model point runs vLLM on the CPU: profile {profile.name!r} runs {profile.engine}")
    return profile.with_settings(model_dir=MODEL_DIR, engine_dir=ENGINE_DIR, served_model_name=SERVED_NAME)


def repository_dir(profile: Profile) -> Path:
    return triton_repo_dir(f"{profile.name}-serve-larger")


def prepare_larger(profile: Profile, spec: LargerLlamaSpec = LargerLlamaSpec()) -> tuple[Profile, Path, dict[str, Any]]:
    """Make the larger model (kept if already made), write its engine config and fill its Serve
    repository; returns the larger profile, the repository and the model's summary."""
    larger = larger_profile(profile)
    made = make_larger_llama(larger.path("model_dir"), profile.path("model_dir"), spec)
    write_engine_config(larger)
    repo = repository_dir(profile)
    fill_serve_repository(larger, output_dir=repo)
    return larger, repo, made
