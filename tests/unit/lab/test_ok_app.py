"""scripts.lab.ok_app: a deployment whose options are the only thing that varies."""
from scripts.lab.ok_app import Ok
from scripts.lab.serve_state import deployment_options


def test_ok_answers_ok():
    assert Ok.func_or_class()(request=None) == "ok"


def test_the_options_of_a_config_dict_reach_the_deployment():
    dep = {"name": "Picky", "num_replicas": 2, "ray_actor_options": {"num_gpus": 0.5, "accelerator_type": "A100"}}
    shaped = Ok.options(**deployment_options(dep))
    assert shaped.name == "Picky" and shaped.num_replicas == 2
    assert shaped.ray_actor_options["num_gpus"] == 0.5 and shaped.ray_actor_options["accelerator_type"] == "A100"


def test_a_never_placed_replica_is_not_waited_for_20_s():
    from ray.serve._private.config import DeploymentConfig

    from scripts.lab.gpu_probe import GpuProbe
    from scripts.lab.ok_app import PENDING_DELETE_S

    assert PENDING_DELETE_S < DeploymentConfig().graceful_shutdown_timeout_s  # Serve's default: 20 s
    for deployment in (Ok, GpuProbe):
        shaped = deployment.options(**deployment_options({"name": "TooBig", "ray_actor_options": {"num_gpus": 3}}))
        assert shaped._deployment_config.graceful_shutdown_timeout_s == PENDING_DELETE_S
    own = Ok.options(name="Slow", graceful_shutdown_timeout_s=30)
    assert own._deployment_config.graceful_shutdown_timeout_s == 30
