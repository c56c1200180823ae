"""scripts.clients.load: the background load and the retrying client against the real routes on a
loopback port (a fake Triton behind them, failing for a while where told), the steady load against
a stand-in router, and the numbers of its records."""
import time

import pytest

from scripts.clients import load
from scripts.clients.load import BackgroundLoad, LoadReport, RetryingLoad, retryable

from fakes import FakeBackend, fake_service, json_http_server, long_service, serving


def test_background_load_keeps_requests_in_flight_until_stopped(chat_url, chat_service):
    load = BackgroundLoad(chat_url, concurrency=3, max_tokens=4).start()
    deadline = time.monotonic() + 30
    while len(chat_service.backend.calls) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    burst = load.stop()
    assert set(burst) == {"sent", "succeeded", "errors", "error_count"}
    assert burst["sent"] >= 10 and burst["succeeded"] == burst["sent"] and burst["error_count"] == 0
    assert burst["sent"] == len(chat_service.backend.calls)  # every request it counted reached the app


def test_background_load_counts_the_errors_it_gets():
    with serving(long_service(fail=0)) as url:
        burst = BackgroundLoad(url, concurrency=2).start().stop()
    assert burst["sent"] >= 1 and burst["succeeded"] == 0 and burst["error_count"] == burst["sent"]
    assert burst["errors"][0].startswith("HTTP 500: ") and len(burst["errors"]) <= 3


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
        assert load.wait_succeeded(10, timeout_s=60) >= 11  # past the 5 failures, however slow the machine
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
    with serving(fake_service(fail=0)) as url:
        load = RetryingLoad(url, concurrency=1, max_tokens=4, give_up_s=5, backoff_s=0.05)
        load.begin(lambda: load.report.requests > 0, timeout_s=5)
        with pytest.raises(TimeoutError, match=r"for 1 more requests to .* to succeed: 1 requests: 0 succeeded"):
            load.wait_succeeded(1, timeout_s=0.3)
        load.stop()


def test_load_report_and_error_kind():
    assert LoadReport().format().startswith("0 requests")
    assert load.error_kind("HTTP 503: busy") == "HTTP 503"


def records():
    R = load.Record
    return [R(0.0, 0.2, 200, "blue", 1, False, ""), R(0.1, 0.6, 200, "green", 2, True, ""),
            R(0.3, 0.7, 502, None, None, False, "green: boom"), R(0.5, 1.2, 200, "green", 2, False, "")]


def test_summary_timeline_and_split():
    s = load.summary(records())
    assert s == {"requests": 4, "failed": 1, "by_version": {1: 1, 2: 2}, "by_color": {"blue": 1, "green": 2},
                 "retried": 1, "errors": {"green": 1}}
    bins = load.timeline(records(), bin_s=0.5)
    assert [b["t"] for b in bins] == [0.0, 0.5, 1.0] and bins[0]["ok"] == {1: 1} and bins[1] == {"t": 0.5, "ok": {2: 1}, "failed": 1}
    within, share, tolerance = load.split_within(records(), "green", 0.5)
    assert share == pytest.approx(2 / 3) and within and tolerance == pytest.approx(3 * (0.25 / 3) ** 0.5)
    with pytest.raises(ValueError, match="no answered request"):
        load.split_within([], "green", 0.1)
    assert load.timeline([]) == []


def _router_answer(path, body):
    if body["prompt"] == "fail":
        return 502, {"error": "green: down"}
    return 200, {"color": "blue", "version": 1, "retried": False, "text": body["prompt"]}


@pytest.fixture
def http_url():
    with json_http_server(_router_answer) as (url, _):
        yield url


def test_the_steady_load_records_every_request_and_its_failures(http_url):
    steady = load.SteadyLoad(http_url, concurrency=3, prompt="hello", max_tokens=2).start()
    steady.wait_for(20, timeout_s=30)
    at = steady.mark("half")
    got = steady.stop()
    assert len(got) >= 20 and all(r.ok and r.version == 1 for r in got) and 0 < at <= got[-1].end_s + 1
    failing = load.SteadyLoad(http_url, concurrency=1, prompt="fail").start()
    bad = failing.stop()
    assert bad and all(r.status == 502 and r.error == "green: down" for r in bad)
    with pytest.raises(ValueError, match="at least 1"):
        load.SteadyLoad(http_url, concurrency=0)


def test_the_steady_load_waits_for_answers_it_observes_and_says_what_came_instead(http_url):
    """Phases end on answers seen (``wait_answers``), never on a fixed time a slow box misses."""
    steady = load.SteadyLoad(http_url, concurrency=2, prompt="hello", max_tokens=2).start()
    try:
        steady.mark("now")
        got = steady.wait_answers(5, timeout_s=30, since="now", version=1, color="blue")
        assert len(got) >= 5 and all(r.start_s >= steady.marks["now"] and r.version == 1 for r in got)
        with pytest.raises(TimeoutError, match=r"for 1 answers \{'version': 2\} from .* after 'now': 0 came; .*'by_version': \{1: "):
            steady.wait_answers(1, timeout_s=0.3, since="now", version=2)
    finally:
        steady.stop()


def test_a_load_against_nothing_fails_its_records_not_the_caller():
    steady = load.SteadyLoad("http://127.0.0.1:9/", concurrency=1).start(timeout_s=10)
    got = steady.stop()
    assert got and got[0].status == 0 and "ConnectError" in got[0].error
