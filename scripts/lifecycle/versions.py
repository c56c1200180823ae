"""One Triton model with two versions, loaded and unloaded live (notebook 08).

The model ``lm`` is the profile's text-in model (``standalone_model``: on ``cpu`` the ``vllm``
backend, used the way Triton's official vLLM backend is) with two version folders, each with its
own ``model.json`` naming a different checkpoint: version 1 is the profile's tiny Llama (notebook
00), version 2 a second tiny Llama trained here with another seed and fewer steps, so the two
answer some prompts differently and a reader can tell from the text which version replied.

Triton facts used here (server r24.10, the 2.51.0 of the ``cpu`` profile: ``docs/user_guide/
model_management.md``, "Model Control Mode EXPLICIT", and ``model_configuration.md``, "Version Policy"):

* with ``--model-control-mode=explicit`` nothing loads until ``POST /v2/repository/models/<m>/load``;
  the load may carry a whole model config as JSON (``{"parameters": {"config": "..."}}``), which
  replaces ``config.pbtxt`` for that load: the way to change a version policy without editing files;
* ``version_policy`` is ``latest { num_versions: N }`` (the default, N = 1), ``all { }`` or
  ``specific { versions: [...] }``; a request that names no version goes to the highest-numbered
  version that is ready;
* a request for a version that is not loaded fails with a 4xx naming the model and version.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from scripts.engine.config import read_engine_config, vllm_engine_kwargs
from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama
from scripts.paths import build_dir
from scripts.profiles import Profile
from scripts.triton.repository.fill import fill_for_profile

MODEL = "lm"
#: Version 2: the same architecture trained again, another seed and fewer steps (about 10 s on 2 cores)
VERSION_2_SPEC = TinyLlamaSpec(seed=1, train_steps=80)
POLICIES = ("latest", "all", "specific")


def lifecycle_dir() -> Path:
    return build_dir() / "08_lifecycle"


def require_text_model(profile: Profile) -> str:
    """The profile's text-in model type, or a clear refusal for a profile that has none."""
    model = profile.get("standalone_model")
    if not model:
        raise SystemExit(f"profile {profile.name} has no text-in model with per-version engine arguments "
                         "(standalone_model is empty), which this lesson loads in versions: run it with PROFILE='cpu'")
    return model


def version_checkpoints(profile: Profile, spec: TinyLlamaSpec = VERSION_2_SPEC) -> dict[int, Path]:
    """{1: the profile's model, 2: a second tiny Llama}, made offline where missing."""
    v1 = profile.path("model_dir")
    if not (v1 / "config.json").is_file():
        raise FileNotFoundError(f"{v1} has no model: run notebook 00 first")
    v2 = lifecycle_dir() / "models" / f"tiny-llama-seed{spec.seed}-steps{spec.train_steps}"
    if not (v2 / "config.json").is_file():
        make_tiny_llama(v2, spec)
    return {1: v1, 2: v2}


def engine_arguments(profile: Profile, checkpoint: Path) -> dict[str, Any]:
    """A version's ``model.json``: the profile's engine arguments with this version's checkpoint."""
    config = read_engine_config(profile.path("engine_dir"))
    return vllm_engine_kwargs(config) | {"model": str(checkpoint), "tokenizer": str(checkpoint),
                                         "kv_cache_space_gib": config.get("kv_cache_space_gib", 1)}


def fill_versioned_model(profile: Profile, repo: Path, checkpoints: dict[int, Path], name: str = MODEL) -> Path:
    """Write ``repo/<name>/config.pbtxt`` (the profile's text-in model, renamed) and one folder per
    version with its ``model.json``; returns the model folder. An existing folder is replaced."""
    template_model = require_text_model(profile)
    staging = repo.parent / f".{repo.name}-staging"
    shutil.rmtree(staging, ignore_errors=True)
    fill_for_profile(profile, output_dir=staging, models=[template_model])
    folder = repo / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    text = (staging / template_model / "config.pbtxt").read_text()
    (folder / "config.pbtxt").write_text(text.replace(f'name: "{template_model}"', f'name: "{name}"'))
    shutil.rmtree(staging)
    for version, checkpoint in sorted(checkpoints.items()):
        (folder / str(version)).mkdir()
        (folder / str(version) / "model.json").write_text(json.dumps(engine_arguments(profile, checkpoint), indent=2) + "\n")
    return folder


def file_config(model_dir: Path) -> dict[str, Any]:
    """``config.pbtxt`` as the JSON a load request carries (Triton's ``ModelConfig`` protobuf)."""
    from google.protobuf import json_format, text_format  # noqa: PLC0415
    from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

    message = text_format.Parse((Path(model_dir) / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def with_policy(config: dict[str, Any], policy: str, versions: list[int] | None = None) -> dict[str, Any]:
    """A copy of ``config`` with another ``version_policy``."""
    return {**config, "version_policy": version_policy(policy, versions)}


def version_policy(policy: str, versions: list[int] | None = None) -> dict[str, Any]:
    """The ``version_policy`` field of a model config, as JSON."""
    if policy == "latest":
        return {"latest": {"num_versions": len(versions) if versions else 1}}
    if policy == "all":
        return {"all": {}}
    if policy == "specific":
        if not versions:
            raise ValueError("a specific version policy needs versions, e.g. [1]")
        return {"specific": {"versions": list(versions)}}
    raise ValueError(f"unknown version policy {policy!r}: use one of {', '.join(POLICIES)}")


class Triton:
    """Triton's repository and inference routes over HTTP (KServe v2 and its extensions)."""

    def __init__(self, http_url: str, timeout_s: float = 300):
        self.url, self.timeout_s = http_url.rstrip("/"), timeout_s

    def index(self) -> list[dict[str, Any]]:
        """``POST /v2/repository/index``: every model of the repositories, with version, state, reason."""
        r = requests.post(f"{self.url}/v2/repository/index", json={}, timeout=30)
        r.raise_for_status()
        return r.json()

    def states(self, name: str = MODEL) -> dict[str, str]:
        """{version: state} of one model, from the index (READY, UNAVAILABLE ...)."""
        return {e.get("version", "-"): e.get("state", "-") for e in self.index() if e["name"] == name}

    def config(self, name: str = MODEL) -> dict[str, Any]:
        r = requests.get(f"{self.url}/v2/models/{name}/config", timeout=30)
        r.raise_for_status()
        return r.json()

    def load(self, name: str = MODEL, config: dict[str, Any] | None = None) -> "LoadResult":
        """Load (or reload) a model; ``config`` replaces its ``config.pbtxt`` for this load."""
        body = {"parameters": {"config": json.dumps(config)}} if config is not None else {}
        start = time.monotonic()
        r = requests.post(f"{self.url}/v2/repository/models/{name}/load", json=body, timeout=self.timeout_s)
        error = "" if r.ok else r.json().get("error", r.text)
        return LoadResult(name, r.status_code, error, time.monotonic() - start)

    def unload(self, name: str = MODEL) -> int:
        return requests.post(f"{self.url}/v2/repository/models/{name}/unload", json={}, timeout=self.timeout_s).status_code

    def ready(self, name: str = MODEL, version: int | None = None) -> bool:
        path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/ready"
        return requests.get(self.url + path, timeout=30).status_code == 200

    def ask(self, prompt: str, name: str = MODEL, version: int | None = None, max_tokens: int = 12) -> "Answer":
        """Greedy text from ``/generate``; ``version`` None lets Triton pick (its highest ready version)."""
        path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/generate"
        body = {"text_input": prompt, "sampling_parameters": json.dumps({"max_tokens": max_tokens, "temperature": 0})}
        r = requests.post(self.url + path, json=body, timeout=self.timeout_s)
        data = r.json()
        if not r.ok:
            return Answer(r.status_code, None, "", data.get("error", r.text))
        return Answer(r.status_code, int(data["model_version"]), data["text_output"], "")


@dataclass(frozen=True)
class LoadResult:
    model: str
    status: int
    error: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == 200

    def format(self) -> str:
        return f"load {self.model!r}: " + ("ok" if self.ok else f"HTTP {self.status}: {self.error}")


@dataclass(frozen=True)
class Answer:
    status: int
    version: int | None
    text: str
    error: str

    def format(self) -> str:
        return f"version {self.version}: {self.text!r}" if self.status == 200 else f"HTTP {self.status}: {self.error}"
