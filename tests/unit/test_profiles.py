import pytest

from scripts.paths import REPO_ROOT, build_dir
from scripts.profiles import available_profiles, load_profile


def test_both_profiles_defined():
    assert available_profiles() == ["cpu", "gpu-trtllm", "gpu-transformers", "gpu-vllm"]


def test_relative_paths_live_under_build_dir(build_root):
    p = load_profile("cpu")
    assert build_dir() == build_root
    assert p.path("model_dir") == build_root / "models" / "tiny-llama"
    assert p.engine == "vllm" and p["num_gpus_per_replica"] == 0


def test_default_build_dir_is_repo_build(monkeypatch):
    monkeypatch.delenv("TUTORIAL_BUILD_DIR", raising=False)
    assert build_dir() == REPO_ROOT / "build"


def test_env_override_of_model_dir(build_root, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_MODEL_DIR", str(tmp_path / "llama"))
    assert load_profile("gpu-trtllm").path("model_dir") == tmp_path / "llama"


def test_unknown_profile_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown profile 'gpu'.*'cpu', 'gpu-transformers', 'gpu-trtllm', 'gpu-vllm'"):
        load_profile("gpu")


def test_unknown_setting_names_the_file():
    with pytest.raises(KeyError, match="has no setting 'nope'.*profiles.toml"):
        load_profile("cpu")["nope"]


def test_bind_host_defaults_to_loopback_and_refuses_a_name(monkeypatch):
    from scripts.profiles import bind_host

    monkeypatch.delenv("TUTORIAL_BIND_HOST", raising=False)
    assert bind_host() == "127.0.0.1"
    monkeypatch.setenv("TUTORIAL_BIND_HOST", "0.0.0.0")
    assert bind_host() == "0.0.0.0"
    monkeypatch.setenv("TUTORIAL_BIND_HOST", "localhost")
    with pytest.raises(ValueError, match="not an IP address"):
        bind_host()


def test_with_settings_replaces_only_what_it_is_given(build_root):
    p = load_profile("cpu")
    other = p.with_settings(model_dir="models/other", served_model_name="other")
    assert other.path("model_dir") == build_root / "models" / "other" and other["served_model_name"] == "other"
    assert {k: v for k, v in other.settings.items() if k not in ("model_dir", "served_model_name")} == \
        {k: v for k, v in p.settings.items() if k not in ("model_dir", "served_model_name")}
    assert p["model_dir"] == "models/tiny-llama"  # the profile itself is unchanged
    with pytest.raises(KeyError, match="no setting"):
        p.with_settings(model_dri="models/other")


@pytest.mark.parametrize("name", available_profiles())
def test_serve_targets_stay_within_the_engines_batch(name):
    """A replica's Triton runs at most the engine's batch at once (TensorRT-LLM's max_batch_size, vLLM's and
    transformers' max_num_seqs): Serve's target must be reachable within it, and what a replica holds beyond
    the batch would only queue behind the engine's slots instead of in Serve's queue."""
    from scripts.engine.config import engine_batch

    profile = load_profile(name)
    batch = engine_batch(profile)
    target, most = profile["serve_target_ongoing_requests"], profile["serve_max_ongoing_requests"]
    assert target <= most <= batch, (f"{name}: serve_target_ongoing_requests {target} <= serve_max_ongoing_requests "
                                     f"{most} <= the engine's batch {batch} does not hold")


def test_gpu_trtllm_fills_triton_with_the_engines_batch():
    """gpu-trtllm builds and fills as tensorrtllm_backend v0.17.0's docs/llama.md does (max_batch_size 64,
    triton_max_batch_size:64); the other profiles keep RepoSettings' default."""
    from scripts.triton.repository.fill import RepoSettings, template_values

    trtllm = load_profile("gpu-trtllm")
    settings = RepoSettings.for_profile(trtllm, decoupled_mode=True)
    assert settings.triton_max_batch_size == trtllm["triton_max_batch_size"] == trtllm["max_batch_size"]
    assert settings.decoupled_mode
    values = template_values({"engine": "tensorrt_llm", "model_dir": "/m", "max_seq_len": 2048, "max_input_len": 1024,
                              "_engine_dir": "/e"}, settings)
    assert {v["triton_max_batch_size"] for v in values.values()} == {trtllm["triton_max_batch_size"]}
    assert RepoSettings.for_profile(load_profile("cpu")) == RepoSettings()


def test_a_skipped_notebook_is_refused_with_the_profiles_reason():
    gpu = load_profile("gpu-trtllm")
    reason = gpu.skipped_notebooks()["07_benchmark_and_monitor"]
    with pytest.raises(SystemExit, match=r"07_benchmark_and_monitor does not run on profile gpu-trtllm: .*vLLM"):
        gpu.require_notebook("07_benchmark_and_monitor")
    assert "vllm serve" in reason
    gpu.require_notebook("04_launch_triton_server")  # not skipped: no error
    assert load_profile("cpu").skipped_notebooks() == {}
    load_profile("cpu").require_notebook("07_benchmark_and_monitor")
