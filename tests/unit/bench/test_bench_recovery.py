"""scripts.bench.recovery: the retrying client against routes that fail for a while, the replacement
watcher over a scripted serve.status(), and the memory readings."""
import os
import time
import types

import pytest

from scripts.bench import recovery
from scripts.bench.recovery import LoadReport, RetryingLoad, retryable, rss_bytes, rss_table, watch_replacement

from fakes import FakeBackend, fake_service, serving


class FailingAtFirst(FakeBackend):
    """Triton's request error for the first ``failures`` requests, then the usual answer."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    async def generate(self, inputs, parameters=None):
        if self.failures > 0:
            self.failures -= 1
            self.fail = 0
        else:
            self.fail = None
        async for chunk in super().generate(inputs):
            yield chunk


def test_retryable_errors_are_the_servers_not_the_clients():
    assert retryable("HTTP 500: Triton could not serve") and retryable("ConnectError: refused")
    assert not retryable("HTTP 400: 'max_tokens' must be at least 1") and not retryable("HTTP 404: no model")


def test_retrying_load_loses_nothing_when_the_server_recovers():
    service = fake_service(default_max_tokens=4)
    service.backend = FailingAtFirst(5)
    with serving(service) as url:
        load = RetryingLoad(url, concurrency=2, max_tokens=4, backoff_s=0.01).start()
        time.sleep(0.3)
        report = load.stop()
    assert report.lost == 0 and report.succeeded == report.requests > 0
    assert report.failed_attempts == 5 and report.attempt_errors == {"HTTP 500": 5} and 1 <= report.retried <= 5
    assert "0 lost" in report.format() and "HTTP 500 x5" in report.format()


def test_retrying_load_gives_up_and_counts_the_request_lost():
    with serving(fake_service(fail=0)) as url:
        load = RetryingLoad(url, concurrency=1, max_tokens=4, give_up_s=0.2, backoff_s=0.05)
        with pytest.raises(RuntimeError, match="no request succeeded"):
            load.start(timeout_s=1)
        report = load.stop()
    assert report.lost >= 1 and report.succeeded == 0 and report.failed_attempts >= 2


def status(deployment_status: str, **replicas: int):
    dep = types.SimpleNamespace(status=deployment_status, replica_states=replicas, message="")
    app = types.SimpleNamespace(status="RUNNING", deployments={"TritonLLM": dep})
    return types.SimpleNamespace(applications={"llm": app})


def scripted(states):
    """A status function and a clock: each call to the status function is one second later."""
    now = {"t": 0.0, "i": 0}

    def status_fn():
        now["i"] = min(now["i"] + 1, len(states))
        now["t"] += 1.0
        return states[now["i"] - 1]

    return status_fn, (lambda: now["t"]), (lambda _s: None)


def test_watch_replacement_times_detection_and_recovery():
    status_fn, clock, sleep = scripted([status("HEALTHY", RUNNING=1), status("HEALTHY", RUNNING=1),
                                        status("UNHEALTHY", RUNNING=0, STARTING=1), status("UPDATING", STARTING=1),
                                        status("HEALTHY", RUNNING=1)])
    seen = watch_replacement("llm", 1, since=0.0, status_fn=status_fn, clock=clock, sleep=sleep)
    assert (seen.detected_s, seen.recovered_s) == (3.0, 5.0)
    assert seen.states == ["HEALTHY (RUNNING 1)", "UNHEALTHY (STARTING 1)", "UPDATING (STARTING 1)",
                           "HEALTHY (RUNNING 1)"]
    assert "noticed after 3.0 s" in seen.format()


def test_watch_replacement_times_out_with_the_states_seen():
    status_fn, clock, sleep = scripted([status("UNHEALTHY", RUNNING=0)])
    with pytest.raises(TimeoutError, match="UNHEALTHY"):
        watch_replacement("llm", 1, since=0.0, timeout_s=5, status_fn=status_fn, clock=clock, sleep=sleep)


def test_rss_of_this_process_and_of_a_gone_one():
    assert rss_bytes(os.getpid()) > 10 * 2**20 and rss_bytes(2**22 - 3) == 0
    assert list(rss_table([("me", os.getpid())])) == [f"me ({os.getpid()})"]
    assert LoadReport().format().startswith("0 requests")
    assert recovery.error_kind("HTTP 503: busy") == "HTTP 503"
