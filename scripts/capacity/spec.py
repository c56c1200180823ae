"""The Serve side: a Serve config (``serve build`` format) read into one spec per deployment.

Per replica: ``ray_actor_options`` (``num_cpus`` default **1**, Ray Serve's default for replicas;
``num_gpus`` default 0; ``memory`` in bytes; ``resources``; ``accelerator_type: X``, which Ray turns
into a demand of 0.001 of ``accelerator_type:X``) or the sum of ``placement_group_bundles``.
Replica counts: ``num_replicas: N`` (default 1) means min = max = N; ``autoscaling_config`` gives
``min_replicas`` and ``max_replicas`` (default 1 each); ``num_replicas: "auto"`` is autoscaling
with Ray Serve's defaults min 1, max 100, overridden by any ``autoscaling_config`` fields.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from scripts.capacity.renamed import ACTOR, change_for
from scripts.capacity.units import (CapacityConfigError, gpu_amount, parse_memory, require_list, require_mapping,
                                    require_number, require_string, typename)

#: Ray Serve's defaults for ``num_replicas: "auto"``.
AUTO_MIN_REPLICAS = 1
AUTO_MAX_REPLICAS = 100
#: Demand Ray adds for ``accelerator_type: X`` in ray_actor_options.
ACCELERATOR_TYPE_DEMAND = 0.001

_ACTOR_OPTIONS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type")
# Allowed by Ray Serve 2.60 but not about resource amounts (label_selector gets a note).
_IGNORED_ACTOR_OPTIONS = ("runtime_env", "label_selector", "fallback_strategy")


@dataclass(frozen=True)
class DeploymentSpec:
    """One Serve deployment as the checker sees it (amounts per replica, human units)."""

    app: str
    name: str
    where: str                     # location in the config, e.g. "applications[0].deployments[1]"
    min_replicas: int
    max_replicas: int
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    accelerator_type: str | None = None
    autoscaling: bool = False
    max_replicas_per_node: int | None = None
    placement_group_bundles: tuple[Mapping[str, float], ...] | None = None
    placement_group_strategy: str = "PACK"
    notes: tuple[str, ...] = ()
    hides_gpus: bool = False       # its runtime_env hides the GPUs (CUDA_VISIBLE_DEVICES="" or Ray's override on zero)

    @property
    def full_name(self) -> str:
        return f"{self.app}/{self.name}" if self.app else self.name

    @property
    def gpu_requests(self) -> tuple[float, ...]:
        """Separate GPU requests of one replica (one per bundle with placement groups)."""
        if self.placement_group_bundles is not None:
            return tuple(b["GPU"] for b in self.placement_group_bundles if b.get("GPU", 0) > 0)
        return (self.num_gpus,) if self.num_gpus > 0 else ()

    @property
    def demand(self) -> dict[str, float]:
        """Everything one replica needs on its node: ``CPU``, ``GPU``, ``memory``, custom keys."""
        if self.placement_group_bundles is not None:
            total: Counter = Counter()
            for bundle in self.placement_group_bundles:
                total.update(bundle)
            return {k: v for k, v in total.items() if v > 0}
        demand: dict[str, float] = {"CPU": self.num_cpus, "GPU": self.num_gpus, "memory": self.memory}
        demand.update(self.resources)
        if self.accelerator_type:
            key = f"accelerator_type:{self.accelerator_type}"
            demand[key] = demand.get(key, 0) + ACCELERATOR_TYPE_DEMAND
        return {k: v for k, v in demand.items() if v > 0}

    @property
    def replicas_field(self) -> str:
        return "autoscaling_config.min_replicas" if self.autoscaling else "num_replicas"


def _parse_resources(value: Any, where: str) -> dict[str, float]:
    resources = {}
    for key, amount in require_mapping(value, where).items():
        if not isinstance(key, str) or not key:
            raise CapacityConfigError(f"{where} keys must be resource names (strings), got {key!r}")
        if key in ("CPU", "GPU", "memory"):
            option = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}[key]
            raise CapacityConfigError(f"{where}.{key}: use ray_actor_options.{option} instead of resources.{key}")
        resources[key] = require_number(amount, f"{where}.{key}")
    return resources


def _parse_bundles(value: Any, where: str) -> tuple[dict[str, float], ...]:
    bundles = []
    for i, raw in enumerate(require_list(value, where)):
        here = f"{where}[{i}]"
        bundle: dict[str, float] = {}
        for key, amount in require_mapping(raw, here).items():
            if key in ("num_cpus", "num_gpus", "cpu", "gpu"):
                raise CapacityConfigError(f"{here}.{key}: bundles name resources as Ray does: CPU, GPU, memory")
            if key == "memory":
                bundle[key] = parse_memory(amount, f"{here}.memory")
            elif key == "GPU":
                bundle[key] = gpu_amount(amount, f"{here}.GPU")
            else:
                bundle[str(key)] = require_number(amount, f"{here}.{key}")
        bundles.append(bundle)
    if not bundles:
        raise CapacityConfigError(f"{where} must list at least one bundle")
    return tuple(bundles)


def _parse_replicas(raw: Mapping[str, Any], where: str) -> tuple[int, int, bool, list[str]]:
    """(min_replicas, max_replicas, autoscaling, notes) of one deployment."""
    notes: list[str] = []
    num = raw.get("num_replicas", None)
    auto_cfg = raw.get("autoscaling_config")
    if num == "auto":
        low, high = AUTO_MIN_REPLICAS, AUTO_MAX_REPLICAS
        notes.append(f"num_replicas: auto = autoscaling with Ray Serve's defaults "
                     f"(min_replicas {AUTO_MIN_REPLICAS}, max_replicas {AUTO_MAX_REPLICAS}) unless "
                     "autoscaling_config overrides them")
    elif num is not None and auto_cfg is not None:
        raise CapacityConfigError(
            f"{where} sets both num_replicas and autoscaling_config: keep one (or use num_replicas: auto)")
    elif isinstance(num, str):
        raise CapacityConfigError(f"{where}.num_replicas must be a whole number >= 0 or 'auto', got {num!r}")
    elif num is not None:
        n = require_number(num, f"{where}.num_replicas", whole=True)
        return n, n, False, notes
    elif auto_cfg is None:
        return 1, 1, False, notes
    else:
        low, high = 1, 1
    if auto_cfg is not None:
        cfg = require_mapping(auto_cfg, f"{where}.autoscaling_config")
        if "min_replicas" in cfg:
            low = require_number(cfg["min_replicas"], f"{where}.autoscaling_config.min_replicas", whole=True)
        if "max_replicas" in cfg:
            high = require_number(cfg["max_replicas"], f"{where}.autoscaling_config.max_replicas",
                                  whole=True, minimum=1)
        if low > high:
            raise CapacityConfigError(
                f"{where}.autoscaling_config.min_replicas ({low}) must be <= max_replicas ({high})")
        if cfg.get("initial_replicas") is not None:
            initial = require_number(cfg["initial_replicas"], f"{where}.autoscaling_config.initial_replicas",
                                     whole=True)
            if not low <= initial <= high:
                raise CapacityConfigError(
                    f"{where}.autoscaling_config.initial_replicas ({initial}) must lie between "
                    f"min_replicas ({low}) and max_replicas ({high})")
    return low, high, True, notes


def _parse_deployment(raw: Any, app: str, where: str) -> DeploymentSpec:
    raw = require_mapping(raw, where)
    if "name" not in raw:
        raise CapacityConfigError(f"{where} lacks 'name': every deployment needs its name")
    name = require_string(raw["name"], f"{where}.name")
    low, high, autoscaling, notes = _parse_replicas(raw, where)
    opts_where = f"{where}.ray_actor_options"
    opts = require_mapping(raw.get("ray_actor_options") or {}, opts_where)
    unknown = sorted(set(opts) - set(_ACTOR_OPTIONS) - set(_IGNORED_ACTOR_OPTIONS))
    removed = [key for key in unknown if change_for(ACTOR, key) is not None]
    if removed:  # check_capacity reports and drops these first; this is for direct callers
        raise CapacityConfigError(
            f"{opts_where}.{removed[0]} was removed from Ray Serve (Ray 2.60 drops it without an error): delete it")
    if unknown:
        raise CapacityConfigError(
            f"{opts_where} has unknown option(s) {', '.join(map(repr, unknown))}: use "
            f"{', '.join(_ACTOR_OPTIONS)} (or {', '.join(_IGNORED_ACTOR_OPTIONS)}, which do not affect placement)")
    if opts.get("label_selector"):
        notes.append("label_selector is not modelled: check that some node carries those labels")
    accelerator = opts.get("accelerator_type")
    if accelerator is not None:
        accelerator = require_string(accelerator, f"{opts_where}.accelerator_type")
    per_node = raw.get("max_replicas_per_node")
    if per_node is not None:
        per_node = require_number(per_node, f"{where}.max_replicas_per_node", whole=True, minimum=1)
    bundles = None
    strategy = "PACK"
    if raw.get("placement_group_bundles") is not None:
        bundles = _parse_bundles(raw["placement_group_bundles"], f"{where}.placement_group_bundles")
        strategy = raw.get("placement_group_strategy") or "PACK"
        if strategy not in ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"):
            raise CapacityConfigError(
                f"{where}.placement_group_strategy must be PACK, STRICT_PACK, SPREAD or STRICT_SPREAD, "
                f"got {strategy!r}")
        if strategy != "STRICT_PACK":
            caveat = "; STRICT_SPREAD itself is not modelled" if strategy == "STRICT_SPREAD" else ""
            notes.append(f"placement_group_strategy {strategy}: all bundles of a replica are checked on one "
                         f"node (conservative{caveat})")
    return DeploymentSpec(
        app=app, name=name, where=where, min_replicas=low, max_replicas=high,
        num_cpus=require_number(opts.get("num_cpus", 1), f"{opts_where}.num_cpus"),
        num_gpus=gpu_amount(opts.get("num_gpus", 0), f"{opts_where}.num_gpus"),
        memory=parse_memory(opts.get("memory", 0), f"{opts_where}.memory"),
        resources=_parse_resources(opts.get("resources") or {}, f"{opts_where}.resources"),
        accelerator_type=accelerator, autoscaling=autoscaling, max_replicas_per_node=per_node,
        placement_group_bundles=bundles, placement_group_strategy=strategy, notes=tuple(notes),
        hides_gpus=_hides_gpus(opts.get("runtime_env")),
    )


def _hides_gpus(runtime_env: Any) -> bool:
    """Whether a replica's ``runtime_env`` keeps CUDA from showing it GPUs when it asks for none:
    ``CUDA_VISIBLE_DEVICES=""``, or ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1``, with which Ray sets it to
    ``""`` for an actor given no GPU (ray 2.60, ``ray/_private/utils.py`` ``set_visible_accelerator_ids``)."""
    env = (runtime_env or {}).get("env_vars") or {} if isinstance(runtime_env, dict) else {}
    return (env.get("CUDA_VISIBLE_DEVICES") == ""
            or str(env.get("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "")).lower() in ("1", "true"))


def parse_serve_config(config: Any) -> list[DeploymentSpec]:
    """Deployments of a Serve config.

    Accepts the ``serve build`` format (a mapping with ``applications: [{name, deployments: [...]}]``),
    a single application (a mapping with ``deployments``), or a plain list of deployment option
    dicts (``{name, num_replicas | autoscaling_config, ray_actor_options, ...}``).
    """
    if isinstance(config, list):
        specs = [_parse_deployment(d, "", f"deployments[{i}]") for i, d in enumerate(config)]
        return _checked_specs(specs)
    if not isinstance(config, Mapping):
        raise CapacityConfigError(
            f"the Serve config must be a mapping with 'applications' or a list of deployments, got {typename(config)}")
    if "applications" in config:
        apps = [(f"applications[{i}]", a) for i, a in enumerate(require_list(config["applications"], "applications"))]
    elif "deployments" in config:
        apps = [("application", config)]
    else:
        raise CapacityConfigError(
            "the Serve config has no 'applications' list: give the `serve build` output "
            "(applications: [{name, import_path, deployments: [...]}]) or a list of deployments")
    specs: list[DeploymentSpec] = []
    for where, app in apps:
        app = require_mapping(app, where)
        app_name = require_string(app["name"], f"{where}.name") if "name" in app else "default"
        if app.get("deployments") is None:
            raise CapacityConfigError(
                f"{where} ({app_name!r}) lists no deployments: add each deployment with its "
                "num_replicas/autoscaling_config and ray_actor_options, as `serve build` writes them")
        for j, dep in enumerate(require_list(app["deployments"], f"{where}.deployments")):
            specs.append(_parse_deployment(dep, app_name, f"{where}.deployments[{j}]"))
    return _checked_specs(specs)


def _checked_specs(specs: list[DeploymentSpec]) -> list[DeploymentSpec]:
    if not specs:
        raise CapacityConfigError("the Serve config lists no deployments")
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.full_name in seen:
            raise CapacityConfigError(
                f"{spec.where} repeats the deployment name {spec.full_name!r} of {seen[spec.full_name]}: "
                "names must be unique")
        seen[spec.full_name] = spec.where
    return specs
