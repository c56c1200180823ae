"""Serve replicas that share one GPU (``num_gpus`` below 1): what Ray counts, and what the memory must hold.

Ray treats ``num_gpus`` as a number: two replicas with ``num_gpus: 0.5`` land on one GPU, and Ray checks
nothing about memory. Each replica of the application starts its own Triton with its own engine, so the
engines of every replica that may run on the GPU must fit its memory. An autoscaled deployment that starts
at ``min_replicas: 1`` adds replicas one at a time, each while the others serve: the engines start one after
another (``parallel_loading=False``), and a vLLM engine's start-up check then sees the others' memory as
used, not as its own (unlike instances of one Triton model, which start together:
:data:`scripts.capacity.instance_memory.VLLM_TOGETHER`).

:func:`gpu_sharing` turns a share (``num_gpus`` per replica) into the deployment's overrides
(``num_gpus``, ``max_replicas``) and the memory estimate for that many engines on one GPU.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Mapping

from scripts.capacity.instance_memory import TritonMemoryEstimate, triton_instance_memory
from scripts.capacity.instance_size import memory_estimate_settings, profile_model_config
from scripts.capacity.units import CapacityConfigError, is_number
from scripts.profiles import Profile


@dataclass(frozen=True)
class GpuSharing:
    """``share`` of a GPU per replica: ``replicas_per_gpu`` replicas on one GPU, up to ``max_replicas``."""

    profile: str
    share: float
    replicas_per_gpu: int
    max_replicas: int
    memory: TritonMemoryEstimate | None   # None: the profile's replicas ask for no GPU
    rehearses: str | None = None           # a rehearsal (scripts.profiles.rehearsal): the GPU profile whose
                                           # replica counts it takes, with no GPU and no memory to check

    @property
    def applies(self) -> bool:
        """The profile's replicas ask for a GPU, so a share of one means something."""
        return self.memory is not None

    @property
    def fits(self) -> bool:
        """The engines of ``replicas_per_gpu`` replicas fit one GPU (always true where no GPU is asked for)."""
        return self.memory is None or self.memory.fits

    @property
    def options(self) -> dict[str, Any]:
        """The application builder's arguments (``num_gpus``, ``max_replicas``); none where nothing is shared."""
        if self.rehearses:
            return {"max_replicas": self.max_replicas}
        return {"num_gpus": self.share, "max_replicas": self.max_replicas} if self.applies else {}

    def apply(self, serve_config: dict[str, Any]) -> dict[str, Any]:
        """A copy of a Serve config (``serve deploy``'s) with every deployment's ``num_gpus`` and
        ``max_replicas`` set to these (for the capacity checker); the config itself where nothing applies."""
        if not self.applies and not self.rehearses:
            return serve_config
        config = copy.deepcopy(serve_config)
        for app in config.get("applications", []):
            for deployment in app.get("deployments", []):
                if self.applies:
                    deployment.setdefault("ray_actor_options", {})["num_gpus"] = self.share
                if "autoscaling_config" in deployment:
                    deployment["autoscaling_config"]["max_replicas"] = self.max_replicas
        return config

    def format(self) -> str:
        if self.rehearses:
            return (f"profile {self.profile}: a rehearsal of {self.rehearses} on the CPU; its replicas ask for no GPU, and "
                    f"max_replicas is {self.rehearses}'s at num_gpus {self.share:g} ({self.replicas_per_gpu} replicas per GPU): "
                    f"{self.max_replicas}. The engines' GPU memory is checked on the GPU only")
        if not self.applies:
            return f"profile {self.profile}: its replicas ask for no GPU, so no share of one applies"
        lines = [f"num_gpus {self.share:g} per replica: {self.replicas_per_gpu} replicas per GPU, max_replicas "
                 f"{self.max_replicas}; each replica starts its own Triton and engine, one after another as the "
                 "deployment scales up"]
        return "\n".join(lines + [self.memory.format_report()])


def replicas_per_gpu(share: float) -> int:
    """How many replicas with ``share`` of a GPU each Ray places on one GPU; a share outside (0, 1] is refused."""
    if not is_number(share) or not 0 < share <= 1:
        raise CapacityConfigError(f"a share of one GPU must be a number in (0, 1], got {share!r}; a replica that "
                                  "needs several GPUs asks for them whole (the profile's num_gpus_per_replica)")
    return math.floor(1 / share + 1e-9)


def replica_ceiling(profile: Profile, share: float) -> int:
    """The replicas the application may scale to with ``share`` of a GPU per replica: the profile's
    ``serve_max_replicas`` (whole GPUs) times the replicas one GPU takes; for replicas that ask for no GPU
    (a rehearsal: the replicas of the GPU profile it plays), the profile's own."""
    per_gpu = replicas_per_gpu(share)
    return profile["serve_max_replicas"] * (per_gpu if _shares_a_gpu(profile) else 1)


def _shares_a_gpu(profile: Profile) -> bool:
    """Whether the replicas take one GPU each, so a share of one applies (for a rehearsal: the GPU profile's)."""
    return (profile.rehearses or profile)["num_gpus_per_replica"] == 1


def cluster_cpus(profile: Profile, share: float) -> int:
    """Ray's logical CPUs the application needs at its peak: ``serve_num_cpus_per_replica`` for each of
    :func:`replica_ceiling` replicas (Serve's controller and proxy reserve none), at least 1. Notebook 05's
    ``NUM_CPUS`` default: gpu-trtllm reserves 2 per replica, so two replicas sharing a GPU need 4."""
    return max(1, math.ceil(profile["serve_num_cpus_per_replica"] * replica_ceiling(profile, share)))


def gpu_sharing(profile: Profile, share: float, gpu_memory_bytes: int | None = None,
                model_config: Mapping[str, Any] | None = None) -> GpuSharing:
    """``share`` (``num_gpus`` per replica, in (0, 1]) for the profile's application on GPUs of
    ``gpu_memory_bytes``: ``1 / share`` replicas (rounded down) share a GPU, and ``max_replicas`` is the
    profile's (which counts whole GPUs) times that. ``model_config``: the model's ``config.json`` (default:
    the profile's model directory's). Profiles whose replicas ask for no GPU get no estimate."""
    per_gpu = replicas_per_gpu(share)
    if profile.rehearses is not None and _shares_a_gpu(profile):
        return GpuSharing(profile.name, share, per_gpu, replica_ceiling(profile, share), None, profile.rehearses.name)
    if not profile["num_gpus_per_replica"]:
        return GpuSharing(profile.name, share, per_gpu, profile["serve_max_replicas"], None)
    if profile["num_gpus_per_replica"] != 1:
        raise CapacityConfigError(f"profile {profile.name} gives each replica {profile['num_gpus_per_replica']} GPUs "
                                  "(tensor parallelism): its replicas cannot share one")
    if gpu_memory_bytes is None:
        raise CapacityConfigError("the GPU's memory is needed to check that the engines fit: pass gpu_memory_bytes")
    memory = triton_instance_memory(memory_estimate_settings(profile), 1, gpu_memory_bytes,
                                    profile_model_config(profile) if model_config is None else model_config,
                                    replicas_per_gpu=per_gpu)
    return GpuSharing(profile.name, share, per_gpu, replica_ceiling(profile, share), memory)
