"""scripts.capacity.spec: a Serve config read into deployment specs."""
import pytest

from capacity_builders import app, dep, nodes
from scripts.capacity import CapacityConfigError, check_capacity
from scripts.capacity.spec import AUTO_MAX_REPLICAS, parse_serve_config


def test_defaults_num_cpus_one_and_auto_replicas():
    specs = parse_serve_config([{"name": "A", "num_replicas": "auto"}])
    assert (specs[0].min_replicas, specs[0].max_replicas, specs[0].autoscaling) == (1, AUTO_MAX_REPLICAS, True)
    assert f"max_replicas {AUTO_MAX_REPLICAS}" in specs[0].notes[0]
    auto = {"name": "A", "num_replicas": "auto", "autoscaling_config": {"max_replicas": 3}}
    specs = parse_serve_config([auto])
    assert (specs[0].min_replicas, specs[0].max_replicas) == (1, 3)
    (spec,) = parse_serve_config([{"name": "A"}])
    assert (spec.num_cpus, spec.num_gpus, spec.min_replicas, spec.max_replicas) == (1, 0, 1, 1)


def test_demand_adds_the_accelerator_type_and_sums_bundles():
    (spec,) = parse_serve_config(app(dep("T", 1, accelerator_type="H100", memory="2GiB")))
    assert spec.full_name == "llm/T"
    assert spec.demand == {"CPU": 1, "GPU": 1, "memory": 2 * 2**30, "accelerator_type:H100": 0.001}
    (pg,) = parse_serve_config([{"name": "P", "placement_group_bundles": [{"CPU": 1, "GPU": 1}, {"GPU": 1}]}])
    assert pg.demand == {"CPU": 1, "GPU": 2} and pg.gpu_requests == (1, 1)
    assert "all bundles of a replica are checked on one node" in pg.notes[0]


@pytest.mark.parametrize("config, message", [
    (app(dep("A"), dep("B", "one")),
     "applications[0].deployments[1].ray_actor_options.num_gpus must be a number >= 0, got 'one'"),
    (app(dep("A", -1)), "ray_actor_options.num_gpus must be a number >= 0, got -1"),
    (app(dep("A", 1.5)), "num_gpus must be a whole number when greater than 1"),
    (app(dep("A", replicas=-2)), "applications[0].deployments[0].num_replicas must be a whole number >= 0, got -2"),
    (app(dep("A", replicas="two")), "num_replicas must be a whole number >= 0 or 'auto', got 'two'"),
    ([{"name": "A", "placement_group_bundles": [{"num_gpus": 1}]}], "bundles name resources as Ray does"),
    (app(dep("A", autoscale=(3, 2))), "autoscaling_config.min_replicas (3) must be <= max_replicas (2)"),
    (app(dict(dep("A", autoscale=(1, 2)), num_replicas=2)), "sets both num_replicas and autoscaling_config"),
    (app({"num_replicas": 1}), "applications[0].deployments[0] lacks 'name'"),
    (app(dep("A", num_gpu=1)), "unknown option(s) 'num_gpu'"),
    (app(dep("A", resources={"GPU": 1})), "use ray_actor_options.num_gpus instead of resources.GPU"),
    (app(dep("A", memory="8 GB of RAM")), "must be a number of bytes >= 0 or a size like '16GiB'"),
    (app(dep("A", memory="8GX")), "unknown memory unit 'GX'"),
    (app(dep("A", num_cpus=True)), "num_cpus must be a number >= 0, got True"),
    (app(dep("A"), dep("A")), "repeats the deployment name 'llm/A'"),
    ({"applications": {"name": "x"}}, "applications must be a list, got dict"),
    ({"applications": [{"name": "x", "import_path": "m:app"}]}, "lists no deployments"),
    ({"proxy_location": "EveryNode"}, "has no 'applications' list"),
    ([], "lists no deployments"),
    ("just text", "must be a mapping with 'applications' or a list of deployments"),
])
def test_malformed_serve_config(config, message):
    with pytest.raises(CapacityConfigError) as info:
        check_capacity(config, nodes(1))
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)
