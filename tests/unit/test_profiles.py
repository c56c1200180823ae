import json
import tomllib

import pytest

from scripts.paths import PROFILES_FILE, REPO_ROOT, build_dir
from scripts.profile_model import ServeSettings, VllmEngine
from scripts.profiles import ProfileError, available_profiles, load_profile


def test_the_four_profiles_defined():
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
    assert {k: v for k, v in other.items() if k not in ("model_dir", "served_model_name")} == \
        {k: v for k, v in p.items() if k not in ("model_dir", "served_model_name")}
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
    values = template_values({"engine": "tensorrt_llm", "model_dir": "/m", "max_seq_len": 2048, "max_input_len": 1024},
                             settings, "/e")
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


# --- the typed profile: what env/profiles.toml may say, checked when a profile loads


def write_profiles(tmp_path, edit):
    """env/profiles.toml copied to a temporary file, with ``edit(tables)`` applied to its tables."""
    tables = tomllib.loads(PROFILES_FILE.read_text())
    edit(tables)
    path = tmp_path / "profiles.toml"
    path.write_text(toml_text(tables))
    return path


def toml_text(tables):
    """A small TOML writer for the profiles' shapes: flat tables, one level of sub-tables."""
    def value(v):  # TOML's basic strings, booleans and numbers read as JSON writes them
        return json.dumps(v)

    lines = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {value(v)}" for k, v in table.items() if not isinstance(v, dict)]
        for sub, entries in ((k, v) for k, v in table.items() if isinstance(v, dict)):
            lines.append(f"[{name}.{sub}]")
            lines += [f"{value(k)} = {value(v)}" for k, v in entries.items()]
    return "\n".join(lines) + "\n"


def test_the_copy_loads_as_the_file_does(tmp_path, build_root):
    path = write_profiles(tmp_path, lambda tables: None)
    for name in available_profiles():
        assert dict(load_profile(name, path=path)) == dict(load_profile(name))


def test_an_unknown_key_is_refused_with_the_key_it_resembles(tmp_path):
    path = write_profiles(tmp_path, lambda t: t["gpu-vllm"].update(max_num_seq=t["gpu-vllm"].pop("max_num_seqs")))
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-vllm", path=path)
    assert f"{path} [gpu-vllm]: unknown key 'max_num_seq' (did you mean 'max_num_seqs'?)" in str(err.value)
    assert f"{path} [gpu-vllm]: missing required key 'max_num_seqs'" in str(err.value)
    load_profile("cpu", path=path)  # the other profiles still load


def test_another_engines_key_is_named_as_such(tmp_path):
    path = write_profiles(tmp_path, lambda t: t["cpu"].update(checkpoint_dir="engine/ckpt"))
    with pytest.raises(ProfileError, match=r"\[cpu\]: unknown key 'checkpoint_dir' \(a setting of engine tensorrt_llm only\)"):
        load_profile("cpu", path=path)


@pytest.mark.parametrize("key, value, message", [
    ("max_num_seqs", "64", "key 'max_num_seqs': Input should be a valid integer, got '64' (str)"),
    ("enforce_eager", 1, "key 'enforce_eager': Input should be a valid boolean, got 1 (int)"),
    ("serve_max_replicas", 0, "key 'serve_max_replicas': Input should be greater than 0, got 0 (int)"),
    ("engine_start_method", "forkserver", "key 'engine_start_method': Input should be 'spawn', 'fork' or 'auto'"),
    ("dtype", "float64", "key 'dtype': Input should be 'bfloat16', 'float16' or 'float32'"),
])
def test_a_wrong_type_or_value_is_refused_with_its_key(tmp_path, key, value, message):
    path = write_profiles(tmp_path, lambda t: t["cpu"].update({key: value}))
    with pytest.raises(ProfileError) as err:
        load_profile("cpu", path=path)
    assert f"{path} [cpu]: {message}" in str(err.value)


@pytest.mark.parametrize("name, key", [("cpu", "serve_max_replicas"), ("gpu-trtllm", "max_batch_size"),
                                       ("gpu-transformers", "model_dir"), ("gpu-vllm", "tritonserver_version")])
def test_a_missing_required_key_is_refused_with_its_description(tmp_path, name, key):
    path = write_profiles(tmp_path, lambda t: t[name].pop(key))
    with pytest.raises(ProfileError, match=rf"^{path} \[{name}\]: missing required key '{key}': .+$"):
        load_profile(name, path=path)


def test_cross_field_checks(tmp_path):
    def edit(t):
        t["cpu"].update(serve_min_replicas=3)
        t["gpu-vllm"].pop("model_shape")
        t["gpu-transformers"].update(engine="vllm-ish")
        t["gpu-trtllm"].update(gpu_counterpart="gpu")
    path = write_profiles(tmp_path, edit)
    for name, message in [("cpu", "serve_min_replicas 3 exceeds serve_max_replicas 2"),
                          ("gpu-vllm", "model_source 'shaped' needs model_shape"),
                          ("gpu-transformers", "key 'engine' must be one of 'vllm', 'transformers', 'tensorrt_llm'"),
                          ("gpu-trtllm", "key 'gpu_counterpart' names no profile of the file")]:
        with pytest.raises(ProfileError, match=rf"\[{name}\]: {message}"):
            load_profile(name, path=path)


def test_with_settings_validates_and_names_the_file_relative_to_the_repository():
    with pytest.raises(ProfileError, match=r"^env/profiles.toml \[gpu-vllm\]: key 'max_num_seqs': "
                                           r"Input should be a valid integer, got '64' \(str\)$"):
        load_profile("gpu-vllm").with_settings(max_num_seqs="64")
    with pytest.raises(KeyError, match="no setting.*'max_num_seq'"):
        load_profile("gpu-vllm").with_settings(max_num_seq=3)


def test_typed_attributes_and_flat_keys_agree(build_root):
    for name in available_profiles():
        profile = load_profile(name)
        typed = profile.settings
        assert isinstance(typed.serve, ServeSettings) and typed.serve.serve_max_replicas == profile["serve_max_replicas"]
        assert typed.engine_options.max_model_len == profile["max_model_len"] and typed.model.model_dir == profile["model_dir"]
        assert typed.expect.gpu_counterpart == profile["gpu_counterpart"]
    cpu = load_profile("cpu")
    assert isinstance(cpu.settings.engine_options, VllmEngine) and cpu.settings.engine_options.gpu_memory_utilization is None
    assert "gpu_memory_utilization" not in cpu and cpu.get("gpu_memory_utilization") is None  # unset reads as absent
    assert load_profile("gpu-trtllm").get("engine_start_method") is None  # another engine's key: absent too


def test_every_field_is_described():
    from scripts.profile_model import PROFILE_MODELS

    for model in PROFILE_MODELS.values():
        for section in [model, *model.sections().values()]:
            undescribed = [k for k, f in section.model_fields.items() if not f.description]
            assert not undescribed, f"{section.__name__}: {undescribed}"


def test_a_rehearsal_is_the_host_engine_with_the_targets_serve_settings():
    from scripts.profile_model import ServeSettings
    from scripts.profiles import HOST_SERVE_KEYS

    rehearsal, cpu, trtllm = load_profile("gpu-trtllm@cpu"), load_profile("cpu"), load_profile("gpu-trtllm")
    assert rehearsal.name == "gpu-trtllm@cpu" and rehearsal.rehearses == trtllm and rehearsal.engine == cpu.engine
    serve_keys = set(ServeSettings.model_fields)
    for key in rehearsal:
        expected = trtllm[key] if key in serve_keys - HOST_SERVE_KEYS else cpu[key]
        assert rehearsal[key] == expected, key
    assert rehearsal["serve_downscale_delay_s"] == 300 and rehearsal["num_gpus_per_replica"] == 0
    assert rehearsal.path("model_dir") == cpu.path("model_dir")


def test_a_rehearsal_needs_a_cpu_host_and_known_profiles():
    with pytest.raises(ValueError, match="runs on a CPU profile"):
        load_profile("cpu@gpu-vllm")
    with pytest.raises(ValueError, match="unknown profile 'gpu-nope'"):
        load_profile("gpu-nope@cpu")
