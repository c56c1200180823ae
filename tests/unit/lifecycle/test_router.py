"""scripts.lifecycle.router: weights, draws, the breaker, the release configs (the steady load and its
records: tests/unit/clients/test_load.py). The whole release (Serve, a real Triton with two
versions, a steady load) runs in notebook 08."""
from __future__ import annotations

import asyncio
import json
import random

import pytest

from scripts.lifecycle import router


def test_weights_are_validated_with_what_to_fix():
    assert router.validate_weights({"blue": 90, "green": 10}, ["blue", "green"]) == {"blue": 90, "green": 10}
    assert router.validate_weights({"green": 5}, ["blue", "green"]) == {"blue": 0, "green": 5}
    for bad, message in (({"red": 1}, "unknown color"), ({"blue": -1}, "whole number >= 0"), ({"blue": 0.5}, "whole number"),
                         ({"blue": True}, "whole number"), ({"blue": 0, "green": 0}, "every weight is 0"), ([], "mapping")):
        with pytest.raises(ValueError, match=message):
            router.validate_weights(bad, ["blue", "green"])


def test_draws_follow_the_weights_within_three_sigma():
    rng, n = random.Random(0), 10_000
    share = sum(router.choose({"blue": 90, "green": 10}, rng) == "green" for _ in range(n)) / n
    assert abs(share - 0.10) <= 3 * (0.1 * 0.9 / n) ** 0.5
    assert {router.choose({"blue": 0, "green": 1}, rng) for _ in range(100)} == {"green"}
    assert router.fallback({"blue": 90, "green": 10}, "green") == "blue" and router.fallback({"blue": 1}, "blue") is None


class _Response:
    """Awaitable and cancellable, like Serve's DeploymentResponse."""

    def __init__(self, coroutine):
        self.coroutine, self.cancelled = coroutine, False

    def __await__(self):
        return self.coroutine.__await__()

    def cancel(self):
        self.cancelled = True


class _Backend:
    def __init__(self, version, fail=False, hang=False):
        self.version, self.fail, self.hang = version, fail, hang
        self.generate, self.responses = self, []

    def remote(self, prompt, max_tokens):
        async def answer():
            if self.hang:  # no live replica: Serve would queue the call
                await asyncio.sleep(3600)
            if self.fail:
                raise RuntimeError("version not found")
            return {"version": self.version, "text": prompt}
        self.responses.append(_Response(answer()))
        return self.responses[-1]


class _Request:
    def __init__(self, body):
        self.body = body

    async def json(self):
        if isinstance(self.body, Exception):
            raise self.body
        return self.body


def make_router(weights, breaker_errors=3, green_fails=False, green_hangs=False, **config):
    cls = router.Router.func_or_class
    r = cls.__new__(cls)
    r.backends, r.replica = {"blue": _Backend(1), "green": _Backend(3, fail=green_fails, hang=green_hangs)}, "r1"
    r.reconfigure({"weights": weights, "seed": 0, "breaker_errors": breaker_errors, **config})
    return r


def call(r, body):
    response = asyncio.run(r(_Request(body)))
    return response.status_code, json.loads(response.body)


def test_a_failing_color_is_retried_on_the_other_and_the_breaker_opens():
    r = make_router({"blue": 50, "green": 50}, breaker_errors=2, green_fails=True)
    answers = [call(r, {"prompt": "p", "max_tokens": 2}) for _ in range(40)]
    assert all(status == 200 and body["version"] == 1 for status, body in answers)
    assert sum(body["retried"] for _, body in answers) == 2  # two failures, then green gets nothing
    state = asyncio.run(r.state())
    assert state["effective_weights"] == {"blue": 50, "green": 0} and state["weights"]["green"] == 50
    r.reconfigure({"weights": {"blue": 50, "green": 50}})
    assert asyncio.run(r.state())["effective_weights"]["green"] == 50  # a new configuration closes it


def test_a_color_that_does_not_answer_times_out_and_counts_for_the_breaker():
    r = make_router({"blue": 1, "green": 99}, breaker_errors=2, green_hangs=True, request_timeout_s=0.05)
    answers = [call(r, {"prompt": "p", "max_tokens": 2}) for _ in range(3)]
    assert [(status, body["version"], body["retried"]) for status, body in answers] == [(200, 1, True)] * 2 + [(200, 1, False)]
    green = r.backends["green"].responses
    assert len(green) == 2 and all(response.cancelled for response in green)  # the breaker opened after two
    assert asyncio.run(r.state())["effective_weights"] == {"blue": 1, "green": 0}
    only_green = make_router({"green": 1}, green_hangs=True, request_timeout_s=0.05)
    only_green.backends = {"green": only_green.backends["green"]}
    only_green.weights = only_green.effective = {"green": 1}
    status, body = call(only_green, {"prompt": "p", "max_tokens": 2})
    assert status == 502 and body["error"] == "green: no answer from green within 0.05 s"
    for bad in (0, -1, "10", True):
        with pytest.raises(ValueError, match="request_timeout_s"):
            make_router({"blue": 1}, request_timeout_s=bad)


def test_bad_bodies_are_a_400_that_says_what_to_send():
    r = make_router({"blue": 1})
    for body in ({"max_tokens": 2}, {"prompt": "", "max_tokens": 2}, {"prompt": "p", "max_tokens": 0}, ValueError("not JSON")):
        status, answer = call(r, body)
        assert status == 400 and '"prompt"' in answer["error"]


def test_each_release_step_is_a_valid_serve_config_whose_code_version_stays():
    from ray.serve._private.deploy_utils import get_app_code_version
    from ray.serve.schema import ServeDeploySchema

    release = router.Release("lifecycle", "/lm", "http://127.0.0.1:1", "lm", "http://127.0.0.1:2",
                             http_options={"host": "127.0.0.1", "port": 3}, breaker_errors=5)
    blue = release.config({"blue": 1, "green": 2}, {"blue": 100})
    green = release.config({"blue": 1, "green": 3}, {"blue": 10, "green": 90})
    app = blue["applications"][0]
    assert app["import_path"] == "scripts.lifecycle.router:app" and blue["http_options"]["port"] == 3
    assert app["deployments"] == [{"name": "Router", "user_config": {"weights": {"blue": 100, "green": 0}, "seed": 0, "breaker_errors": 5,
                                                                     "request_timeout_s": 60.0}},
                                  {"name": "lm-blue", "user_config": {"version": 1}}, {"name": "lm-green", "user_config": {"version": 2}}]
    schemas = [ServeDeploySchema.model_validate(c).applications[0] for c in (blue, green)]
    # only user_config differs: Serve reconfigures the running replicas instead of replacing them
    assert get_app_code_version(schemas[0]) == get_app_code_version(schemas[1])
    with pytest.raises(ValueError, match="unknown color"):
        release.config({"blue": 1}, {"green": 1})


class _Ingress:
    """A router handle whose breaker opens at the third look, after a reconfigure had reset it once."""

    def __init__(self, opens_at: int):
        self.looks, self.opens_at = 0, opens_at
        self.state = self

    def remote(self):
        async def answer():
            self.looks += 1
            green = 0 if self.looks >= self.opens_at else 10
            return {"effective_weights": {"blue": 90, "green": green}, "errors": {"green": 3 if green == 0 else 1}}
        return answer()


def test_the_rollback_waits_until_the_breaker_is_seen_open_or_says_what_it_saw():
    state = asyncio.run(router.wait_for_breaker(_Ingress(opens_at=3), "green", timeout_s=10, poll_s=0.01))
    assert state["effective_weights"]["green"] == 0
    with pytest.raises(TimeoutError, match=r"breaker for 'green' did not open within 0.05 s: .*'green': 10"):
        asyncio.run(router.wait_for_breaker(_Ingress(opens_at=10**6), "green", timeout_s=0.05, poll_s=0.01))
