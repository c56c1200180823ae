"""Serve config keys that Ray 2.60 no longer takes, and the key that replaced each one.

Why it is built this way, and the sources: docs/design/capacity.md.
"""
from __future__ import annotations

from dataclasses import dataclass

# Scopes: where in a `serve build` config a key lives.
TOP = "top level"                      # the config itself (ServeDeploySchema)
HTTP = "http_options"                  # config["http_options"] (HTTPOptionsSchema)
APP = "application"                    # config["applications"][i] (ServeApplicationSchema)
DEPLOYMENT = "deployment"              # ...["deployments"][j] (DeploymentSchema)
AUTOSCALING = "autoscaling_config"     # ...["deployments"][j]["autoscaling_config"] (AutoscalingConfig)
ACTOR = "ray_actor_options"            # ...["deployments"][j]["ray_actor_options"] (RayActorOptionsSchema)

#: Finding kinds of this module's keys (each one fails the capacity report).
KEY_KINDS = ("renamed_key", "moved_key", "removed_key")

#: Ray 2.60's defaults that take over when an old key is dropped.
DEFAULT_MAX_ONGOING_REQUESTS = 5       # ray/serve/_private/constants.py DEFAULT_MAX_ONGOING_REQUESTS
DEFAULT_TARGET_ONGOING_REQUESTS = 2    # ray/serve/_private/constants.py DEFAULT_TARGET_ONGOING_REQUESTS
DEFAULT_HTTP_HOST = "0.0.0.0"          # ray/serve/schema.py HTTPOptionsSchema.host
DEFAULT_HTTP_PORT = 8000               # ray/serve/schema.py HTTPOptionsSchema.port
DEFAULT_PROXY_LOCATION = "EveryNode"   # ray/serve/schema.py ServeDeploySchema.proxy_location


@dataclass(frozen=True)
class KeyChange:
    """One key Ray 2.60 no longer takes where a config puts it."""

    scope: str              # TOP, HTTP, APP, DEPLOYMENT, AUTOSCALING or ACTOR
    old: str                # the key as older guides write it
    new: str | None         # where the value goes now (a key of `new_scope`); None: removed
    new_scope: str          # the scope of `new`
    kind: str               # renamed_key | moved_key | removed_key
    rejected: bool          # True: `serve deploy` fails; False: Ray 2.60 drops the key without an error
    where_defined: str      # Ray 2.60 file and field of the current name (or of the removal)
    effect: str             # what Ray 2.60 does instead; {value} is the value written
    history: str

    @property
    def target(self) -> str:
        """The replacement as a path: ``target_ongoing_requests``, ``http_options.host``, ... ("" if removed)."""
        if self.new is None:
            return ""
        return {self.scope: self.new, HTTP: f"http_options.{self.new}", TOP: f"{self.new} (top level)",
                APP: f"applications[].{self.new}"}[self.new_scope]


_DROPPED = "Ray 2.60 does not know it and drops it without an error"

KEY_CHANGES: tuple[KeyChange, ...] = (
    KeyChange(DEPLOYMENT, "max_concurrent_queries", "max_ongoing_requests", DEPLOYMENT, "renamed_key", False,
              "ray/serve/schema.py DeploymentSchema.max_ongoing_requests",
              f"{_DROPPED}: each replica takes the max_ongoing_requests of the code, or the default "
              f"{DEFAULT_MAX_ONGOING_REQUESTS}, instead of {{value}}",
              "renamed in Ray 2.10, removed in ray-project/ray#46427"),
    KeyChange(AUTOSCALING, "target_num_ongoing_requests_per_replica", "target_ongoing_requests", AUTOSCALING,
              "renamed_key", False,
              "ray/serve/config.py AutoscalingConfig.target_ongoing_requests",
              f"{_DROPPED}: the autoscaler aims at the default target_ongoing_requests "
              f"{DEFAULT_TARGET_ONGOING_REQUESTS} instead of {{value}}",
              "renamed in Ray 2.10, removed in ray-project/ray#46392"),
    KeyChange(ACTOR, "object_store_memory", None, ACTOR, "removed_key", False,
              "ray/serve/schema.py RayActorOptionsSchema (no such field); ray/serve/_private/config.py "
              "ReplicaConfig._validate_ray_actor_options (not in the allowed options)",
              "Ray 2.60's serve deploy drops it without an error (@serve.deployment rejects it): "
              "Ray Core has no per-actor object store limit",
              "ray-project/ray#45814"),
    KeyChange(APP, "host", "host", HTTP, "moved_key", True,
              "ray/serve/schema.py HTTPOptionsSchema.host (ServeDeploySchema.http_options); "
              "ray/serve/schema.py ServeDeploySchema.nested_host_and_port (rejects it)",
              "Ray 2.60's serve deploy rejects the whole config: host belongs to http_options",
              "host/port are single-application fields (ray/serve/schema.py ServeDeploySchema.nested_host_and_port)"),
    KeyChange(APP, "port", "port", HTTP, "moved_key", True,
              "ray/serve/schema.py HTTPOptionsSchema.port (ServeDeploySchema.http_options); "
              "ray/serve/schema.py ServeDeploySchema.nested_host_and_port (rejects it)",
              "Ray 2.60's serve deploy rejects the whole config: port belongs to http_options",
              "host/port are single-application fields (ray/serve/schema.py ServeDeploySchema.nested_host_and_port)"),
    KeyChange(TOP, "host", "host", HTTP, "moved_key", False,
              "ray/serve/schema.py HTTPOptionsSchema.host (ServeDeploySchema.http_options)",
              f"ServeDeploySchema has no host field and drops it without an error: the proxies listen on "
              f"http_options.host (default {DEFAULT_HTTP_HOST}, every interface) instead of {{value}}",
              "host/port at the top level belong to the single-application format (ServeApplicationSchema.host/port)"),
    KeyChange(TOP, "port", "port", HTTP, "moved_key", False,
              "ray/serve/schema.py HTTPOptionsSchema.port (ServeDeploySchema.http_options)",
              f"ServeDeploySchema has no port field and drops it without an error: the proxies listen on "
              f"http_options.port (default {DEFAULT_HTTP_PORT}) instead of {{value}}",
              "host/port at the top level belong to the single-application format (ServeApplicationSchema.host/port)"),
    KeyChange(HTTP, "location", "proxy_location", TOP, "moved_key", False,
              "ray/serve/schema.py ServeDeploySchema.proxy_location (named as the replacement by "
              "ray/serve/config.py HTTPOptions.normalize_location)",
              f"HTTPOptionsSchema has no location field and drops it without an error: proxies run where "
              f"proxy_location says (default {DEFAULT_PROXY_LOCATION}) instead of {{value}}",
              "HTTPOptions.location is deprecated in favour of proxy_location"),
    KeyChange(HTTP, "num_cpus", None, HTTP, "removed_key", False,
              "ray/serve/config.py HTTPOptions.raise_for_num_cpus_assignment "
              "(\"`num_cpus` in HTTPOptions has been removed\")",
              "HTTPOptionsSchema drops it without an error: Serve no longer reserves CPUs for its proxies",
              "ray/serve/config.py HTTPOptions raises for a non-zero num_cpus"),
) + tuple(
    KeyChange(TOP, key, key, APP, "moved_key", False,
              f"ray/serve/schema.py ServeApplicationSchema.{key} (ServeDeploySchema.applications)",
              f"ServeDeploySchema has no {key} field and drops it without an error: only "
              f"applications[].{key} is read",
              "application keys at the top level belong to the single-application format")
    for key in ("import_path", "route_prefix", "runtime_env", "args", "deployments")
)

#: The single-application format: a config with ``import_path`` at the top level and no ``applications``.
SINGLE_APP_FORMAT = KeyChange(
    TOP, "import_path", "import_path", APP, "moved_key", True,
    "ray/serve/schema.py ServeDeploySchema.applications (required; ServeApplicationSchema.import_path)",
    "Ray 2.60's serve deploy (and serve run CONFIG) reads configs as ServeDeploySchema, which requires "
    "an applications list, and rejects the whole config",
    "the single-application format (ServeApplicationSchema as the whole file)")


@dataclass(frozen=True)
class DeprecatedKey:
    """An autoscaling key Ray 2.60 still honours but marks deprecated: a note, not a failure."""

    old: str
    instead: str
    where_defined: str


DEPRECATED_KEYS: tuple[DeprecatedKey, ...] = (
    DeprecatedKey("upscale_smoothing_factor", "upscaling_factor",
                  "ray/serve/config.py AutoscalingConfig.upscaling_factor"),
    DeprecatedKey("downscale_smoothing_factor", "downscaling_factor",
                  "ray/serve/config.py AutoscalingConfig.downscaling_factor"),
    DeprecatedKey("smoothing_factor", "upscaling_factor and downscaling_factor",
                  "ray/serve/config.py AutoscalingConfig.upscaling_factor/downscaling_factor"),
    DeprecatedKey("metrics_interval_s", "the environment variables RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_"
                  "INTERVAL_S and RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
                  "ray/serve/config.py AutoscalingConfig.metrics_interval_s_deprecation_warning"),
)


def change_for(scope: str, key: str) -> KeyChange | None:
    """The table entry for ``key`` in ``scope``, or None when Ray 2.60 takes the key there."""
    for change in KEY_CHANGES:
        if change.scope == scope and change.old == key:
            return change
    return None
