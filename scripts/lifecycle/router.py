"""Blue-green and canary releases through Ray Serve, in front of one shared Triton (notebook 08).

Why it is built this way, and the sources: docs/design/lifecycle.md.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from scripts.lifecycle.versions import generate_body, generate_route

#: The router's defaults, for a user_config that leaves them out (Release sends both)
BREAKER_ERRORS = 3
REQUEST_TIMEOUT_S = 60.0


def validate_weights(weights: Any, colors: list[str] | tuple[str, ...]) -> dict[str, int]:
    """Traffic weights as whole numbers per color; ``ValueError`` says what to fix."""
    if not isinstance(weights, dict) or not weights:
        raise ValueError(f"weights must be a mapping of color to a whole number, such as {{'{colors[0]}': 100}}")
    unknown = sorted(set(weights) - set(colors))
    if unknown:
        raise ValueError(f"unknown color(s) {unknown}: use {sorted(colors)}")
    out = {}
    for color in colors:
        value = weights.get(color, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"weight of {color!r} is {value!r}: give a whole number >= 0")
        out[color] = value
    if not any(out.values()):
        raise ValueError("every weight is 0: give at least one color a positive weight")
    return out


def choose(weights: dict[str, int], rng: random.Random) -> str:
    """A color drawn with probability proportional to its weight."""
    colors = [c for c, w in weights.items() if w > 0]
    return rng.choices(colors, weights=[weights[c] for c in colors])[0]


def fallback(weights: dict[str, int], failed: str) -> str | None:
    """The color to send a request to after ``failed`` failed: the heaviest other one with traffic
    (or, if none has any, the heaviest configured other color)."""
    others = sorted((c for c in weights if c != failed), key=lambda c: -weights[c])
    return others[0] if others else None


@serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
class TritonVersion:
    """One color: forwards prompts to one version of a Triton model (``/versions/<v>/generate``)."""

    def __init__(self, triton_http: str, model: str, version: int):
        self.base, self.model, self.version = triton_http.rstrip("/"), model, int(version)
        self.client = httpx.AsyncClient(timeout=120)

    def reconfigure(self, config: dict) -> None:
        self.version = int(config.get("version", self.version))

    def url(self, route: str) -> str:
        return self.base + generate_route(self.model, self.version, route)

    async def generate(self, prompt: str, max_tokens: int) -> dict:
        r = await self.client.post(self.url("generate"), json=generate_body(prompt, max_tokens))
        if r.status_code != 200:
            raise RuntimeError(f"{self.url('generate')} answered {r.status_code}: {r.text[:300]}")
        data = r.json()
        return {"version": int(data["model_version"]), "text": data["text_output"]}

    async def check_health(self) -> None:
        """Serve calls this every ``health_check_period_s``; a version Triton does not serve is unhealthy."""
        r = await self.client.get(self.url("ready"))
        if r.status_code != 200:
            raise RuntimeError(f"{self.model} version {self.version} is not ready in Triton ({r.status_code})")


@serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=256)
class Router:
    """The ingress: POST ``{"prompt": ..., "max_tokens": ...}``; answers with the color and version."""

    def __init__(self, backends: dict):
        self.backends = backends
        self.weights = self.effective = {c: 0 for c in backends}
        self.rng, self.breaker_errors, self.timeout_s = random.Random(0), BREAKER_ERRORS, REQUEST_TIMEOUT_S
        self.errors = {c: 0 for c in backends}
        self.replica = serve.get_replica_context().replica_id.unique_id

    def reconfigure(self, config: dict) -> None:
        self.weights = validate_weights(config.get("weights"), list(self.backends))
        self.effective = dict(self.weights)
        self.errors = {c: 0 for c in self.backends}
        self.rng = random.Random(config.get("seed", 0))
        self.breaker_errors = int(config.get("breaker_errors", BREAKER_ERRORS))
        timeout_s = config.get("request_timeout_s", REQUEST_TIMEOUT_S)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"request_timeout_s is {timeout_s!r}: give the seconds a backend may take, > 0")
        self.timeout_s = float(timeout_s)

    async def state(self) -> dict:
        return {"weights": self.weights, "effective_weights": self.effective, "errors": self.errors, "replica": self.replica}

    async def _ask(self, color: str, prompt: str, max_tokens: int) -> dict:
        response = self.backends[color].generate.remote(prompt, max_tokens)
        try:
            answer = await asyncio.wait_for(response, self.timeout_s)
        except Exception as exc:
            self.errors[color] += 1
            if self.errors[color] >= self.breaker_errors:
                self.effective[color] = 0  # the breaker opens: nothing to this color until reconfigured
            if isinstance(exc, asyncio.TimeoutError):
                response.cancel()  # Serve drops the call, queued or running (DeploymentResponse.cancel)
                raise TimeoutError(f"no answer from {color} within {self.timeout_s:g} s") from None
            raise
        self.errors[color] = 0
        return answer

    async def __call__(self, request: Request) -> JSONResponse:
        try:
            body = await request.json()
            prompt, max_tokens = body["prompt"], int(body.get("max_tokens", 16))
            if not isinstance(prompt, str) or not prompt or max_tokens < 1:
                raise ValueError
        except Exception:  # noqa: BLE001 - any malformed body is the client's to fix
            return JSONResponse({"error": 'send JSON {"prompt": "<non-empty text>", "max_tokens": <int >= 1>}'}, status_code=400)
        live = self.effective if any(self.effective.values()) else self.weights
        color, retried = choose(live, self.rng), False
        try:
            answer = await self._ask(color, prompt, max_tokens)
        except Exception as exc:  # noqa: BLE001 - one more try on the other color, then a 502
            other = fallback(self.effective, color)
            if other is None:
                return JSONResponse({"error": f"{color}: {exc}"}, status_code=502)
            try:
                color, retried, answer = other, True, await self._ask(other, prompt, max_tokens)
            except Exception as again:  # noqa: BLE001
                return JSONResponse({"error": f"{color}: {again}"}, status_code=502)
        return JSONResponse(answer | {"color": color, "retried": retried, "router": self.replica})


async def wait_for_breaker(ingress, color: str, timeout_s: float, poll_s: float = 0.2) -> dict:
    """Poll the router (``ingress``: its deployment handle) until its breaker for ``color`` is open
    (effective weight 0); returns that state. Observed, not timed: a reconfigure that lands after the
    first failures resets the count, and the breaker opens later. ``TimeoutError`` with the last state."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = await ingress.state.remote()
        if state["effective_weights"].get(color) == 0:
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"the router's breaker for {color!r} did not open within {timeout_s:g} s: {state}")
        await asyncio.sleep(poll_s)


def app(args: dict):
    """The application (``import_path: scripts.lifecycle.router:app``): one :class:`TritonVersion` per
    color, named ``<model>-<color>``, behind the :class:`Router`. Versions and weights come from the
    deployments' ``user_config`` in the Serve config (:func:`release_config`)."""
    backends = {color: TritonVersion.options(name=f"{args['model']}-{color}").bind(args["triton_http"], args["model"], 1)
                for color in args["colors"]}
    return Router.bind(backends)


@dataclass(frozen=True)
class Release:
    """One application's release steps: each :meth:`apply` is a Serve config (:meth:`config`) with
    these colors' Triton versions and traffic weights, applied declaratively."""

    app_name: str
    route_prefix: str
    triton_http: str
    model: str
    dashboard_url: str
    http_options: dict = field(default_factory=dict)
    seed: int = 0
    breaker_errors: int = BREAKER_ERRORS
    request_timeout_s: float = REQUEST_TIMEOUT_S

    def config(self, versions: dict[str, int], weights: dict[str, int]) -> dict:
        """The Serve config of one step: what ``serve deploy`` and KubeRay's ``serveConfigV2`` carry."""
        weights = validate_weights(weights, list(versions))
        router = {"weights": weights, "seed": self.seed, "breaker_errors": self.breaker_errors,
                  "request_timeout_s": self.request_timeout_s}
        deployments = [{"name": "Router", "user_config": router}]
        deployments += [{"name": f"{self.model}-{color}", "user_config": {"version": int(v)}} for color, v in versions.items()]
        application = {"name": self.app_name, "route_prefix": self.route_prefix, "import_path": "scripts.lifecycle.router:app",
                       "args": {"triton_http": self.triton_http, "model": self.model, "colors": list(versions)},
                       "deployments": deployments}
        return {"http_options": dict(self.http_options), "applications": [application]}

    def apply(self, versions: dict[str, int], weights: dict[str, int], timeout_s: float = 120) -> float:
        """Apply one step (the dashboard's ``PUT /api/serve/applications/``, as ``serve deploy`` does)
        and wait until the application runs it; returns the seconds it took.

        Declaratively, Serve compares the new config with the running one: when only ``user_config``
        values (and other lightweight options) changed, it calls ``reconfigure`` on the running
        replicas. ``serve.run`` cannot do that: an application deployed imperatively carries no code
        version, so every ``serve.run`` replaces every replica (ray 2.60,
        ``serve/_private/application_state.py``, ``deploy_app``: ``code_version=None``). Raises
        RuntimeError with Serve's message if the deployment fails."""
        from ray.dashboard.modules.serve.sdk import ServeSubmissionClient  # noqa: PLC0415

        config = self.config(versions, weights)
        previous = serve.status().applications.get(self.app_name)
        before = previous.last_deployed_time_s if previous else None
        start = time.monotonic()
        ServeSubmissionClient(self.dashboard_url).deploy_applications(config)
        while True:
            status = serve.status().applications.get(self.app_name)
            if status is not None and status.last_deployed_time_s != before:
                if status.status == "RUNNING":
                    return time.monotonic() - start
                if status.status == "DEPLOY_FAILED":
                    raise RuntimeError(f"application {self.app_name!r} failed to deploy: {status.message}")
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"application {self.app_name!r} not running {timeout_s} s after the config was applied: {status}")
            time.sleep(0.2)
