"""One Triton model with two versions, loaded and unloaded live (notebook 08).

Why it is built this way, and the sources: docs/design/lifecycle.md.
"""
from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from scripts.engine.config import read_engine_config
from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama
from scripts.paths import lifecycle_dir
from scripts.profiles import Profile
from scripts.triton.repository.fill import fill_for_profile, standalone_arguments

MODEL = "lm"
#: Version 2: the same architecture trained again, another seed and fewer steps (about 10 s on 2 cores)
VERSION_2_SPEC = TinyLlamaSpec(seed=1, train_steps=80)
POLICIES = ("latest", "all", "specific")


def require_text_model(profile: Profile) -> str:
    """The profile's text-in model type, or a clear refusal for a profile that has none."""
    model = profile.get("standalone_model")
    if not model:
        raise SystemExit(f"profile {profile.name} has no text-in model with per-version engine arguments "
                         "(standalone_model is empty), which this lesson loads in versions: run it with a profile that "
                         "has one (cpu, gpu-vllm)")
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
    (folder / "config.pbtxt").write_text(renamed_config((staging / template_model / "config.pbtxt").read_text(), name))
    shutil.rmtree(staging)
    engine_config = read_engine_config(profile.path("engine_dir"))
    for version, checkpoint in sorted(checkpoints.items()):
        (folder / str(version)).mkdir()
        (folder / str(version) / "model.json").write_text(json.dumps(standalone_arguments(engine_config, checkpoint), indent=2) + "\n")
    return folder


def renamed_config(text: str, name: str) -> str:
    """A ``config.pbtxt`` text with its ``name`` field set to ``name`` (Triton requires the folder's name)."""
    return re.sub(r'^name:\s*"[^"]*"', f'name: "{name}"', text, count=1, flags=re.MULTILINE)


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
    """The ``version_policy`` field of a model config, as JSON: ``latest`` (the newest version, Triton's
    default), ``all``, or ``specific`` with ``versions``."""
    if policy not in POLICIES:
        raise ValueError(f"unknown version policy {policy!r}: use one of {', '.join(POLICIES)}")
    if (policy == "specific") != bool(versions):
        raise ValueError("a specific version policy needs versions, e.g. [1]" if policy == "specific"
                         else f"the {policy} policy takes no versions (only specific does)")
    return {"latest": {"latest": {"num_versions": 1}}, "all": {"all": {}},
            "specific": {"specific": {"versions": list(versions or [])}}}[policy]


def generate_route(name: str, version: int | None, route: str = "generate") -> str:
    """``/v2/models/<name>[/versions/<v>]/<route>``: without a version Triton picks its highest ready one."""
    return f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + f"/{route}"


def generate_body(prompt: str, max_tokens: int) -> dict[str, str]:
    """A greedy request to a text-in model's ``generate`` route (``sampling_parameters`` is a JSON string)."""
    return {"text_input": prompt, "sampling_parameters": json.dumps({"max_tokens": int(max_tokens), "temperature": 0})}


class Triton:
    """One server's model repository (``tritonclient.http``: index, load with a config) and its
    text-in models' ``generate`` route, which tritonclient does not cover (plain HTTP).

    Given the ``server`` itself (a :class:`~scripts.triton.server.TritonServer` this process started)
    instead of its URL, a load that takes the server down is survived as a supervisor would. On a
    CPU-starved machine (``make test``'s two notebook lanes on two cores) Triton 2.51's Python backend
    has aborted while it started or stopped a model's stub (``boost::interprocess::lock_exception``),
    and has left a load waiting forever after the model's initialize() returned (a stall,
    :func:`scripts.triton.crashes.stalled_loads`). Either way the server is started again (new ports;
    the report on stderr and in ``restarts``), what this client had loaded is loaded again with the
    same configs, and the load is tried once more."""

    def __init__(self, http_url: str | None = None, timeout_s: float = 300, server: Any = None):
        if (http_url is None) == (server is None):
            raise ValueError("give Triton the server's http_url or the server itself, not both")
        self._url, self.server, self.timeout_s = (http_url or "").rstrip("/"), server, timeout_s
        self.loaded: dict[str, dict[str, Any] | None] = {}  # name -> the config it was loaded with, in order
        self.restarts: list[str] = []  # why the server was started again: "crashed: ..." or "stalled: ..."

    @property
    def url(self) -> str:
        return self.server.http_url if self.server is not None else self._url

    @contextmanager
    def _client(self) -> Iterator[Any]:
        """A tritonclient for one call, closed after it. A client kept open holds an idle keep-alive
        connection, and a server stopped while one is open spends its whole ``--exit-timeout-secs``
        waiting for it to close, then exits without unloading its models (``HTTPServer::Stop`` counts
        down the exit timeout that ``main.cc`` then gives the unload, Triton v2.51.0)."""
        import tritonclient.http as httpclient  # noqa: PLC0415

        # a load waits for the model's start-up: longer than tritonclient's default 60 s network timeout
        client = httpclient.InferenceServerClient(self.url.split("://", 1)[-1], network_timeout=self.timeout_s)
        try:
            yield client
        finally:
            client.close()

    def index(self) -> list[dict[str, Any]]:
        """``POST /v2/repository/index``: every model of the repositories, with version, state, reason."""
        with self._client() as client:
            return client.get_model_repository_index()

    def states(self, name: str = MODEL) -> dict[str, str]:
        """{version: state} of one model, from the index (READY, UNAVAILABLE ...)."""
        return {e.get("version", "-"): e.get("state", "-") for e in self.index() if e["name"] == name}

    def load(self, name: str = MODEL, config: dict[str, Any] | None = None) -> "LoadResult":
        """Load (or reload) a model; ``config`` replaces its ``config.pbtxt`` for this load. A refusal
        is returned with Triton's message, not raised: the notebook shows it. When this client holds
        the server, a load that crashes it or stalls in it starts it again (see the class)."""
        outcome = self._load_watched(name, config)
        if isinstance(outcome, str):  # the server is lost: start it again, load what it had, try once more
            self._start_again(outcome)
            outcome = self._load_watched(name, config)
            if isinstance(outcome, str):
                raise RuntimeError(f"loading {name!r}, tritonserver failed again after it was started again:\n{outcome}")
        if outcome.ok:
            self.loaded.pop(name, None)
            self.loaded[name] = config
        return outcome

    def _load_watched(self, name: str, config: dict[str, Any] | None, poll_s: float = 1.0) -> "LoadResult | str":
        """The load's result; or, with a held server, what went wrong with it while it loaded ("crashed:
        ..." or "stalled: ..."): the load runs in a thread, the server is watched meanwhile."""
        if self.server is None:
            return self._load_once(name, config)
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["result"] = self._load_once(name, config)
            except Exception as exc:  # noqa: BLE001 - a connection the crash broke, or an error to raise below
                box["error"] = exc

        thread = threading.Thread(target=run, name=f"load-{name}", daemon=True)
        thread.start()
        lost = None
        while thread.is_alive() and lost is None:
            thread.join(poll_s)
            if self.server.process.poll() is not None:
                lost = "crashed"
            elif stalled := self.server.stalled():
                lost = "stalled"
                box["stalled"] = stalled
        if lost is None and "error" in box:  # the connection broke: the server may be on its way out
            deadline = time.monotonic() + 10
            while self.server.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            lost = "crashed" if self.server.process.poll() is not None else None
        if lost == "crashed" and self.server.crashed():
            return f"crashed: {self.server.crash_report()}"
        if lost == "stalled":
            return (f"stalled: the load of {', '.join(box['stalled'])} stalled, initialize() returned but "
                    f"tritonserver never took its answer; log {self.server.log_path}:\n{self.server.log_tail()}")
        if "error" in box:
            raise box["error"]
        if "result" not in box:  # the server exited on its own (not by a signal) while loading
            raise RuntimeError(f"tritonserver exited while loading {name!r}; log {self.server.log_path}:\n"
                               f"{self.server.log_tail()}")
        return box["result"]

    def _start_again(self, lost: str) -> None:
        """Start the held server again (its report on stderr and in ``restarts``) and load again what it had."""
        what, _, report = lost.partition(": ")
        self.restarts.append(lost)
        self.server.start_again(what if what == "crashed" else "stalled during a load", report, self.timeout_s)
        for name, config in list(self.loaded.items()):
            again = self._load_watched(name, config)
            if isinstance(again, str) or not again.ok:
                raise RuntimeError(f"tritonserver was started again, but {name!r} did not load again: "
                                   f"{again if isinstance(again, str) else again.error}")

    def _load_once(self, name: str, config: dict[str, Any] | None) -> "LoadResult":
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        start = time.monotonic()
        try:
            with self._client() as client:
                client.load_model(name, config=None if config is None else json.dumps(config))
        except InferenceServerException as exc:
            return LoadResult(name, int(exc.status() or 0), exc.message(), time.monotonic() - start)
        return LoadResult(name, 200, "", time.monotonic() - start)

    def ask(self, prompt: str, name: str = MODEL, version: int | None = None, max_tokens: int = 12) -> "Answer":
        """Greedy text from ``generate``; ``version`` None lets Triton pick (its highest ready version)."""
        r = requests.post(self.url + generate_route(name, version), json=generate_body(prompt, max_tokens), timeout=self.timeout_s)
        if not r.ok:  # Triton answers {"error": ...}; anything in front of it may answer a page that is no JSON
            try:
                body = r.json()
            except ValueError:
                body = None
            return Answer(r.status_code, None, "", body.get("error", r.text) if isinstance(body, dict) else r.text)
        data = r.json()
        return Answer(r.status_code, int(data["model_version"]), data["text_output"], "", prompt)


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
    text: str  # Triton's text_output: a text-in vLLM model answers the prompt and its continuation
    error: str
    prompt: str = ""

    @property
    def continuation(self) -> str:
        return self.text[len(self.prompt):] if self.prompt and self.text.startswith(self.prompt) else self.text

    def format(self) -> str:
        """``version 1: 'Triton serves' + 'Ray Serve takes ...'``: the prompt and what the model added, apart
        (run together, a continuation without a leading space reads as one word with the prompt)."""
        if self.status != 200:
            return f"HTTP {self.status}: {self.error}"
        if self.prompt and self.text.startswith(self.prompt):
            return f"version {self.version}: {self.prompt!r} + {self.continuation!r}"
        return f"version {self.version}: {self.text!r}"
