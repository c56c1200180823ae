"""Serve replicas sharing one GPU: the deployment's overrides and the memory their engines need."""
import pytest

from scripts.capacity import CapacityConfigError, check_capacity, parse_cluster
from scripts.capacity.gpu_sharing import cluster_cpus, gpu_sharing, replica_ceiling
from scripts.model.configs import LLAMA_3_1_8B, LLAMA_3_2_1B
from scripts.profiles import load_profile
from scripts.serve.config import app_config

H200 = 143_771 * 2**20
GIB = 2**30


def test_half_a_gpu_puts_two_replicas_and_two_engines_on_it():
    profile = load_profile("gpu-vllm")
    sharing = gpu_sharing(profile, 0.5, H200, LLAMA_3_2_1B)
    assert sharing.applies and sharing.fits and sharing.replicas_per_gpu == 2
    assert sharing.max_replicas == 2 * profile["serve_max_replicas"]
    assert sharing.options == {"num_gpus": 0.5, "max_replicas": sharing.max_replicas}
    # vLLM reserves its gpu_memory_utilization of the total (or more, where the model needs more), per engine
    assert sharing.memory.per_instance_bytes >= profile["gpu_memory_utilization"] * H200
    assert sharing.memory.total_instances == 2 and not sharing.memory.parallel_loading
    assert "2 replicas sharing the GPU" in sharing.format()


def test_a_share_too_small_for_the_engines_does_not_fit():
    profile = load_profile("gpu-vllm")
    sharing = gpu_sharing(profile, 0.1, 24 * GIB, LLAMA_3_1_8B)  # ten engines of an 8B model on 24 GiB
    assert sharing.replicas_per_gpu == 10 and not sharing.fits
    assert "Result: FAIL" in sharing.format() and "fewer replicas per GPU" in sharing.format()


def test_the_config_with_the_share_fits_one_gpu_where_the_profiles_would_not_scale():
    profile = load_profile("gpu-vllm")
    cluster = parse_cluster({"nodes": [{"name": "head", "CPU": 16, "GPU": 1}]})
    config = app_config(profile)
    sharing = gpu_sharing(profile, 0.5, H200, LLAMA_3_2_1B)
    shared = sharing.apply(config)
    deployment = shared["applications"][0]["deployments"][0]
    assert deployment["ray_actor_options"]["num_gpus"] == 0.5
    assert deployment["autoscaling_config"]["max_replicas"] == 2
    assert config["applications"][0]["deployments"][0]["ray_actor_options"]["num_gpus"] == 1  # a copy
    assert check_capacity(shared, cluster).ok


def test_a_profile_without_gpus_is_left_as_it_is():
    profile = load_profile("cpu")
    sharing = gpu_sharing(profile, 0.5)
    config = app_config(profile)
    assert not sharing.applies and sharing.fits and sharing.options == {}
    assert sharing.apply(config) is config
    assert "ask for no GPU" in sharing.format()


@pytest.mark.parametrize("share", [0, -0.5, 1.5, "half", None])
def test_a_share_outside_one_gpu_is_refused(share):
    with pytest.raises(CapacityConfigError, match=r"\(0, 1\]"):
        gpu_sharing(load_profile("gpu-vllm"), share, H200, LLAMA_3_2_1B)


def test_the_gpu_memory_is_asked_for():
    with pytest.raises(CapacityConfigError, match="gpu_memory_bytes"):
        gpu_sharing(load_profile("gpu-vllm"), 0.5, None, LLAMA_3_2_1B)


@pytest.mark.parametrize("name", ["cpu", "gpu-vllm", "gpu-transformers", "gpu-trtllm", "gpu-trtllm@cpu"])
def test_the_cluster_notebook_05_starts_holds_its_peak(name):
    # Notebook 05's NUM_CPUS default. gpu-trtllm reserves 2 CPUs per replica; at half a GPU each, two
    # replicas: a cluster of the old fixed 2 CPUs stopped at the capacity check ("CPU: short by 2").
    profile = load_profile(name)
    sharing = gpu_sharing(profile, 0.5, H200, LLAMA_3_2_1B)
    cpus = cluster_cpus(profile, 0.5)
    assert cpus == profile["serve_num_cpus_per_replica"] * sharing.max_replicas == \
        profile["serve_num_cpus_per_replica"] * replica_ceiling(profile, 0.5)
    gpus = 1 if sharing.applies else 0
    fits = check_capacity(sharing.apply(app_config(profile)), parse_cluster({"nodes": [{"CPU": cpus, "GPU": gpus}]}))
    assert fits.ok, fits.format_report()
    short = check_capacity(sharing.apply(app_config(profile)), parse_cluster({"nodes": [{"CPU": cpus - 1, "GPU": gpus}]}))
    assert not short.ok
    if name.startswith("gpu-trtllm"):
        assert cpus == 4


def test_a_rehearsal_takes_the_replica_counts_of_the_gpu_profile_it_plays_without_a_gpu():
    profile = load_profile("gpu-trtllm@cpu")
    sharing = gpu_sharing(profile, 0.5)
    assert not sharing.applies and sharing.fits and sharing.rehearses == "gpu-trtllm"
    assert sharing.max_replicas == 2 * load_profile("gpu-trtllm")["serve_max_replicas"]
    assert sharing.options == {"max_replicas": sharing.max_replicas}  # no num_gpus: its replicas have no GPU
    deployment = sharing.apply(app_config(profile))["applications"][0]["deployments"][0]
    assert deployment["autoscaling_config"]["max_replicas"] == sharing.max_replicas
    assert deployment["ray_actor_options"]["num_gpus"] == 0
    assert "rehearsal of gpu-trtllm" in sharing.format()
    assert cluster_cpus(load_profile("cpu"), 0.5) == 2  # a CPU profile's replicas take no share
    with pytest.raises(CapacityConfigError, match=r"\(0, 1\]"):
        cluster_cpus(profile, 0)
