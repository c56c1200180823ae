"""vLLM's own OpenAI server (``vllm serve``), the baseline the benchmark compares Triton and Ray Serve with.

Why it is built this way, and the sources: docs/design/bench.md.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from scripts.bench.vllm_cli import require_vllm
from scripts.engine.config import engine_settings, read_engine_config, vllm_engine_kwargs, vllm_environment
from scripts.paths import REPO_ROOT, vllm_log_dir
from scripts.profiles import Profile, load_profile
from scripts.procs.managed import ManagedServer
from scripts.procs.ports import free_port


def per_request_stream_interval(vllm_dir: str | Path | None = None) -> bool:
    """Whether this vLLM takes ``stream_interval`` per request (``SamplingParams.stream_interval``, 0.32).

    vLLM 0.26 (the gpu-vllm profile) has only the server's ``--stream-interval``, and its ``vllm serve``
    drops the field from a request body without a word: a benchmark asking for chunks would measure
    every token. Read from the installed vLLM's ``sampling_params.py``, so this process imports no vLLM.
    """
    if vllm_dir is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            require_vllm()
        vllm_dir = spec.submodule_search_locations[0]
    tree = ast.parse((Path(vllm_dir) / "sampling_params.py").read_text())
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SamplingParams"), None)
    if cls is None:
        raise RuntimeError(f"{vllm_dir}/sampling_params.py defines no SamplingParams: a vLLM this tutorial does not know")
    return any(isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "stream_interval"
               for n in cls.body)


def start_beside(vllm: "VllmServer", triton, timeout_s: float, *, one_at_a_time: bool) -> float:
    """Start ``vllm serve`` and a :class:`scripts.triton.server.TritonServer`; the seconds until both
    were ready. Side by side, or ``vllm serve`` first and Triton once it is ready (``one_at_a_time``)."""
    started = time.monotonic()
    if one_at_a_time:
        vllm.start(timeout_s)
        try:
            triton.start(timeout_s=timeout_s, retries=1)
        except BaseException:
            vllm.stop()
            raise
        return time.monotonic() - started
    failure: list[BaseException] = []

    def start_vllm() -> None:
        try:
            vllm.start(timeout_s)
        except BaseException as exc:  # noqa: BLE001 - raised again below, in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=start_vllm, name="vllm-serve-start", daemon=True)
    thread.start()
    try:
        triton.start(timeout_s=timeout_s, retries=1)
    except BaseException:
        thread.join(timeout_s)
        vllm.stop()
        raise
    thread.join(timeout_s)
    if failure:
        triton.stop()
        raise failure[0]
    return time.monotonic() - started


class VllmStartError(RuntimeError):
    """``vllm serve`` exited or did not become ready; the message ends with its log tail."""


def serve_flags(kwargs: dict[str, Any]) -> list[str]:
    """``vllm serve`` arguments for engine keyword arguments: ``model`` positional, the rest flags."""
    args = [str(kwargs["model"])]
    for key, value in kwargs.items():
        if key == "model" or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{flag[2:]}")
        else:
            args += [flag, str(value)]
    return args


def engine_environment(config: dict[str, Any], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM command for the engine ``config`` (``vllm_environment``: the KV-cache
    size, offline hub ...), on top of ``base`` (this process's environment by default)."""
    env = dict(os.environ if base is None else base)
    env.update(vllm_environment(config))
    env.setdefault("LC_ALL", "C.UTF-8")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def vllm_log_path(port: int) -> Path:
    return vllm_log_dir() / f"vllm-serve-{port}.log"


class VllmServer(ManagedServer):
    """One ``vllm serve`` process group: started on a free loopback port, polled until ready, stopped by handle."""

    name = "vllm serve"
    start_error = VllmStartError

    def __init__(self, config: dict[str, Any], served_model_name: str, *, port: int | None = None,
                 log_path: Path | None = None, extra_args: tuple[str, ...] = (), stream_interval: int = 1):
        self.config = dict(config)
        self.served_model_name = served_model_name
        self.stream_interval = stream_interval  # the server's --stream-interval: every stream's least chunk
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.extra_args = tuple(extra_args)
        super().__init__(Path(log_path) if log_path else vllm_log_path(self.port))
        self.startup_s: float | None = None

    @classmethod
    def from_profile(cls, profile: str | Profile = "cpu", engine_dir: str | Path | None = None, **kwargs) -> "VllmServer":
        """The profile's vLLM engine: ``engine_dir``'s ``engine_config.json`` when given (what Triton's
        ``vllm_engine`` reads), else the same settings computed from the profile."""
        profile = load_profile(profile) if isinstance(profile, str) else profile
        if profile.engine != "vllm":
            raise ValueError(f"profile {profile.name!r} runs {profile.engine}, not vLLM: use the cpu profile")
        config = read_engine_config(engine_dir) if engine_dir else engine_settings(profile)
        return cls(config, profile["served_model_name"], **kwargs)

    # -- the command, built without running it ------------------------------------------------------
    def argv(self) -> list[str]:
        return [sys.executable, "-m", "scripts.bench.vllm_cli", "serve", *serve_flags(vllm_engine_kwargs(self.config)),
                "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
                *(["--stream-interval", str(self.stream_interval)] if self.stream_interval > 1 else []), *self.extra_args]

    def serving_stream_interval(self, interval: int, timeout_s: float = 300) -> "VllmServer":
        """A server that streams in chunks of ``interval`` tokens to requests asking for them: this one
        where vLLM reads the request's ``stream_interval``; else (vLLM 0.26) this one stopped and a new
        one started with ``--stream-interval interval``, on another port (ask its ``url`` again)."""
        if interval <= 1 or interval == self.stream_interval or per_request_stream_interval():
            return self
        self.stop()
        return VllmServer(self.config, self.served_model_name, extra_args=self.extra_args,
                          stream_interval=interval).start(timeout_s)

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return engine_environment(self.config, base)

    @property
    def cwd(self) -> Path:
        return REPO_ROOT  # ``-m scripts.bench.vllm_cli`` is found there

    # -- handle ---------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        return f"{self.url}/health"

    def start(self, timeout_s: float = 300) -> "VllmServer":
        """Start and wait until ``/health`` answers 200; the start-up time is kept in ``startup_s``."""
        require_vllm()
        self.startup_s = self.launch(timeout_s)
        return self

    def stop(self, grace_s: float = 15) -> None:
        """SIGTERM the group, wait up to ``grace_s``, then SIGKILL what is left (the engine core, the guard)
        and remove its ``/dev/shm`` files."""
        super().stop(grace_s)
