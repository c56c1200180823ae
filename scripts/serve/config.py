"""How the Serve application is deployed: its options, its ``serve build``-style YAML, its repository.

:func:`deployment_options` turns a profile into the deployment's resources and autoscaling policy;
:func:`app_config` puts them into the config that ``serve deploy`` takes, which
``python -m scripts.serve.config`` writes to ``env/serve/<profile>.yaml`` (``--check``: fail if
a committed file differs from the profiles); the capacity checker reads the same files.
:func:`fill_serve_repository` fills the model repository the replicas load. No Ray here: writing
or checking the YAML needs none.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scripts.generated import sync
from scripts.paths import REPO_ROOT, SERVE_CONFIG_DIR, triton_repo_dir
from scripts.profiles import Profile, available_profiles, bind_host, load_profile
from scripts.triton.repository.fill import RepoSettings, fill_for_profile

APP_NAME = "llm"
DEPLOYMENT_NAME = "TritonLLM"
IMPORT_PATH = "scripts.serve.app:app_builder"


def serve_repo_dir(profile: Profile) -> Path:
    """The Serve application's model repository: notebook 02's models filled with ``decoupled_mode: true``."""
    return triton_repo_dir(f"{profile.name}-serve")


def fill_serve_repository(profile: Profile, settings: RepoSettings | None = None,
                          output_dir: Path | None = None, engine_dir: Path | None = None) -> dict[str, Any]:
    """Fill the repository the replicas load. Streaming needs the engine (and so the ensemble) to
    be decoupled: a model that is not may send only one response per request.

    The engine step's dynamic batcher waits ``serve_max_queue_delay_microseconds`` (the profile's;
    0 everywhere) instead of notebook 02's 10,000: Triton's delayed batching holds a request for up
    to that long hoping to batch it with others (server ``docs/user_guide/model_configuration.md``,
    "Delayed Batching"), which buys nothing for a decoupled engine that adds every arriving request
    to its running batch at the next step, and costs each request that time before its first token
    (notebook 07: the engine model's TTFT at concurrency 1, about 10 ms more with 10,000).
    ``output_dir``: another place than :func:`serve_repo_dir` (notebook 07's larger model); ``engine_dir``:
    another engine config than the profile's (scripts.bench.response_threads)."""
    settings = settings or RepoSettings.for_profile(
        profile, decoupled_mode=True, max_queue_delay_microseconds=profile["serve_max_queue_delay_microseconds"])
    return fill_for_profile(profile, settings, output_dir=output_dir or serve_repo_dir(profile), engine_dir=engine_dir)


def deployment_options(profile: Profile) -> dict[str, Any]:
    """``Deployment.options`` from the profile: resources per replica and the autoscaling policy.

    GPU profiles must ask for ``num_gpus``: without it Ray may place a replica on a node with no
    GPU (or share one GPU between replicas), and Triton then fails to load the engine.
    """
    return {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": profile["serve_max_ongoing_requests"],
        "autoscaling_config": {
            "min_replicas": profile["serve_min_replicas"],
            "max_replicas": profile["serve_max_replicas"],
            "target_ongoing_requests": profile["serve_target_ongoing_requests"],
            "upscale_delay_s": profile["serve_upscale_delay_s"],
            "downscale_delay_s": profile["serve_downscale_delay_s"],
            "look_back_period_s": profile["serve_look_back_period_s"],
        },
        "ray_actor_options": {"num_cpus": profile["serve_num_cpus_per_replica"],
                              "num_gpus": profile["num_gpus_per_replica"]},
        # Serve replaces a replica after 3 failed checks in a row (REPLICA_HEALTH_CHECK_UNHEALTHY_THRESHOLD,
        # ray/serve/_private/constants.py at 2.60): the period sets how long a dead Triton goes unnoticed.
        "health_check_period_s": profile["serve_health_check_period_s"],
        "health_check_timeout_s": 30,
        # Serve kills a replica that takes longer to stop: leave room for Triton's exit timeout and
        # the launcher's grace periods, so the replica's __del__ stops every process of its Triton.
        "graceful_shutdown_timeout_s": 60,
    }


#: ray/serve/config.py at 2.60 (DEFAULT_METRICS_INTERVAL_S): how often replicas and handles report the
#: requests they hold; the look-back window averages those reports (a unit test reads Ray's value).
METRICS_INTERVAL_S = 10.0
#: What a wait allows beyond Ray's own rule: the controller's loop, a report that arrives late on a busy
#: two-core machine, the replica's Triton stopping.
SCALING_MARGIN_S = 60.0


def downscale_wait_s(profile: Profile) -> float:
    """How long to wait, after the load stops, for Serve to remove the extra replica (notebook 05).

    Ray 2.60's policy (``ray/serve/autoscaling_policy.py``, ``_apply_delay_logic``) removes a replica once it
    has wanted fewer for ``downscale_delay_s`` in a row. It wants fewer only when the ongoing requests averaged
    over ``look_back_period_s`` fall below the target, which takes up to one window after the load stops, plus
    a metrics report; the replica then gets ``graceful_shutdown_timeout_s`` to stop. Twice the window
    covers a burst that still filled part of it, and :data:`SCALING_MARGIN_S` the rest."""
    options = deployment_options(profile)
    return (profile["serve_downscale_delay_s"] + 2 * profile["serve_look_back_period_s"] + METRICS_INTERVAL_S
            + options["graceful_shutdown_timeout_s"] + SCALING_MARGIN_S)


def upscale_wait_s(profile: Profile, start_timeout_s: float) -> float:
    """How long to wait, once a burst starts, for the added replica to run: Serve wants more after one metrics
    report, adds the replica after ``upscale_delay_s`` of wanting it, and the new replica's Triton then
    starts its engine (``start_timeout_s``: the notebook's deploy timeout); a window of averaging and
    :data:`SCALING_MARGIN_S` on top."""
    return (profile["serve_upscale_delay_s"] + profile["serve_look_back_period_s"] + METRICS_INTERVAL_S
            + start_timeout_s + SCALING_MARGIN_S)


def config_source(profile: Profile) -> str:
    """Where :func:`app_config` of the profile is written for ``serve deploy``: its generated file, or, for a
    rehearsal (``scripts.profiles.rehearsal``), which has none, the profiles it is made of."""
    path = config_path(profile.name)
    if path.is_file():
        return str(path.relative_to(REPO_ROOT))
    return f"profile {profile.name}: the host's engine with {profile.rehearses.name}'s Serve settings (no file)" \
        if profile.rehearses is not None else f"profile {profile.name} (no file)"


def app_config(profile: Profile, http_port: int = 8000) -> dict[str, Any]:
    """The ``serve build``-style config of the application (what ``serve deploy`` takes)."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": bind_host(), "port": http_port},
        "applications": [{
            "name": APP_NAME,
            "route_prefix": "/",
            "import_path": IMPORT_PATH,
            "args": {"profile": profile.name},
            "deployments": [deployment_options(profile)],
        }],
    }


def config_path(profile_name: str) -> Path:
    return SERVE_CONFIG_DIR / f"{profile_name}.yaml"


def render_app_config(profile: Profile) -> str:
    header = (f"# Ray Serve config of the LLM application, profile {profile.name} (`serve deploy` this file on a cluster\n"
              "# started with `ray start --head`). Generated from env/profiles.toml by scripts.serve.config; a unit test\n"
              "# keeps the two in step. The capacity checker reads it: python -m scripts.capacity --serve-config ...\n")
    return header + yaml.safe_dump(app_config(profile), sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    """Write ``env/serve/<profile>.yaml`` from the profiles (``--check``: fail if they differ)."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    files = {config_path(name): render_app_config(load_profile(name)) for name in available_profiles()}
    return sync(files, args.check, "python -m scripts.serve.config")

if __name__ == "__main__":
    raise SystemExit(main())
