"""The Serve YAML and deployment options, from the profiles."""
import warnings

import pytest
import yaml

from scripts.capacity import check_capacity, parse_cluster
from scripts.profiles import available_profiles, load_profile
from scripts.serve import config as serve_config
from scripts.serve.app import TritonDeployment, app_builder
from scripts.serve.config import deployment_options, render_app_config


@pytest.mark.parametrize("name", available_profiles())
def test_serve_accepts_each_profiles_options(name):
    profile = load_profile(name)
    with warnings.catch_warnings():  # what Serve only warns of today (a look-back window within the
        warnings.simplefilter("error", FutureWarning)  # metrics interval) is refused in a later release
        deployment = TritonDeployment.options(**deployment_options(profile))  # Serve validates keys and values
    assert deployment.ray_actor_options["num_cpus"] == profile["serve_num_cpus_per_replica"]
    autoscaling = deployment._deployment_config.autoscaling_config
    # Serve scales up when replicas hold more than the target: they must be allowed to hold that many.
    assert deployment.max_ongoing_requests >= autoscaling.target_ongoing_requests
    assert 1 <= autoscaling.min_replicas <= autoscaling.max_replicas
    if profile.engine == "tensorrt_llm":
        assert deployment.ray_actor_options["num_gpus"] >= 1, "GPU replicas must ask Ray for their GPU"


def test_options_follow_the_profile():
    cpu = load_profile("cpu")
    options = deployment_options(cpu.with_settings(serve_max_replicas=5, serve_upscale_delay_s=7, num_gpus_per_replica=1,
                                                   serve_target_ongoing_requests=8, serve_max_ongoing_requests=9))
    assert options["autoscaling_config"]["max_replicas"] == 5 and options["autoscaling_config"]["upscale_delay_s"] == 7
    assert options["ray_actor_options"]["num_gpus"] == 1 and options["max_ongoing_requests"] == 9
    assert options["autoscaling_config"]["target_ongoing_requests"] == 8
    assert deployment_options(cpu) != options


def test_committed_serve_configs_match_the_profiles(capsys):
    assert serve_config.main(["--check"]) == 0, capsys.readouterr().out


def test_the_yaml_deploys_the_app_builder_with_its_profile():
    for name in available_profiles():
        config = yaml.safe_load(render_app_config(load_profile(name)))
        app, = config["applications"]
        module, _, attr = app["import_path"].partition(":")
        assert getattr(__import__(module, fromlist=[attr]), attr) is app_builder
        assert app["args"] == {"profile": name} and app["route_prefix"] == "/"
        assert app["deployments"] == [deployment_options(load_profile(name))]
        assert config["http_options"]["host"] == "127.0.0.1"  # loopback unless a cluster's config says otherwise


def test_main_writes_every_profile_and_check_notices_a_stale_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(serve_config, "SERVE_CONFIG_DIR", tmp_path)
    assert serve_config.main([]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.yaml")) == sorted(available_profiles())
    assert serve_config.main(["--check"]) == 0
    (tmp_path / "cpu.yaml").write_text("applications: []\n")
    capsys.readouterr()
    assert serve_config.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "out of date" in out and str(tmp_path / "cpu.yaml") in out and "python -m scripts.serve.config" in out


def test_serve_configs_pass_the_capacity_checker_where_they_should():
    cpu = yaml.safe_load(serve_config.config_path("cpu").read_text())
    gpu = yaml.safe_load(serve_config.config_path("gpu-trtllm").read_text())
    assert check_capacity(cpu, parse_cluster({"nodes": [{"CPU": 2}]})).ok
    assert not check_capacity(cpu, parse_cluster({"nodes": [{"CPU": 1}]})).ok  # max_replicas 2 x 1 CPU
    assert check_capacity(gpu, parse_cluster({"nodes": [{"CPU": 8, "GPU": 1}]})).ok
    assert not check_capacity(gpu, parse_cluster({"nodes": [{"CPU": 64}]})).ok  # no GPU: replicas would hang


def test_the_serve_repository_is_filled_decoupled_next_to_notebook_02s(build_root):
    from scripts.engine import config as engine
    from scripts.triton.repository.fill import repository_facts

    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    filled = serve_config.fill_serve_repository(profile)
    repo = serve_config.serve_repo_dir(profile)
    assert filled["repository"] == str(repo) and repo.is_relative_to(build_root)
    assert repository_facts(repo).decoupled  # streaming needs it


def test_the_serve_repositorys_engine_step_waits_what_the_profile_says(build_root):
    from scripts.engine import config as engine
    from scripts.triton.repository.fill import read_model_config, repository_facts

    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    serve_config.fill_serve_repository(profile)
    repo = serve_config.serve_repo_dir(profile)
    batching = read_model_config(repo, repository_facts(repo).engine_model).dynamic_batching
    assert batching.max_queue_delay_microseconds == profile["serve_max_queue_delay_microseconds"]
    custom = serve_config.RepoSettings(decoupled_mode=True, max_queue_delay_microseconds=250)
    serve_config.fill_serve_repository(profile, custom)
    assert read_model_config(repo, repository_facts(repo).engine_model).dynamic_batching.max_queue_delay_microseconds == 250


def ray_downscale_decision_s(profile, step_s=0.5):
    """When Ray 2.60's own delay logic (``_apply_delay_logic``) first removes the burst's replica, seconds after
    the load stops: two replicas held 3 x target requests each until then; the controller sees the ongoing
    requests averaged over the look-back window as of the last metrics report (at worst one interval old)."""
    from ray.serve.autoscaling_policy import _apply_delay_logic
    from ray.serve.config import AutoscalingConfig

    config = AutoscalingConfig(**deployment_options(profile)["autoscaling_config"] | {"max_replicas": 2})
    target, window, state, replicas, t = config.target_ongoing_requests, config.look_back_period_s, {}, 2, 0.0
    while t < 10_000:
        reported = t - serve_config.METRICS_INTERVAL_S  # the newest report, at its oldest
        loaded = min(max(0.0, -(reported - window)), window) / window  # the share of the window under load
        average = loaded * 3 * target * replicas
        desired = max(config.min_replicas, min(config.max_replicas, -(-average // target)))
        decided, state = _apply_delay_logic(int(desired), replicas, config, state, _now=t)
        if decided < replicas:
            return t
        t += step_s
    raise AssertionError("Ray never scaled down")


@pytest.mark.parametrize("name", available_profiles() + ["gpu-trtllm@cpu"])
def test_each_derived_scaling_wait_exceeds_what_ray_needs(name):
    from ray.serve.config import DEFAULT_METRICS_INTERVAL_S

    assert serve_config.METRICS_INTERVAL_S == DEFAULT_METRICS_INTERVAL_S
    profile = load_profile(name)
    options = deployment_options(profile)
    needed = ray_downscale_decision_s(profile) + options["graceful_shutdown_timeout_s"]
    assert needed > profile["serve_downscale_delay_s"] + profile["serve_look_back_period_s"]
    assert serve_config.downscale_wait_s(profile) > needed + 30, (name, needed)
    start = 600
    assert serve_config.upscale_wait_s(profile, start) > start + profile["serve_upscale_delay_s"] + serve_config.METRICS_INTERVAL_S


def test_gpu_trtllms_downscale_outlasts_the_old_fixed_wait():
    # notebook 05 waited a fixed 300 s; gpu-trtllm's downscale_delay_s alone is 300
    assert ray_downscale_decision_s(load_profile("gpu-trtllm")) > 300
    assert serve_config.downscale_wait_s(load_profile("gpu-trtllm")) > 400


def test_config_source_names_the_file_or_the_rehearsal():
    assert serve_config.config_source(load_profile("cpu")) == "env/serve/cpu.yaml"
    assert "gpu-trtllm's Serve settings" in serve_config.config_source(load_profile("gpu-trtllm@cpu"))
