"""Loads sent from a thread of their own (its own event loop) while a notebook or a test changes
what serves them, each stopped with ``stop()``:

Why it is built this way, and the sources: docs/design/clients.md.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from scripts.clients.chat import ChatClient, bench_messages


class LoadThread:
    """Requests sent from a thread of their own (its own event loop) until :meth:`halt`;
    subclasses write ``_run`` (the coroutine that sends) and their ``start``/``stop``."""

    def __init__(self, url: str, concurrency: int, max_tokens: int, name: str):
        self.url, self.concurrency, self.max_tokens = url, concurrency, max_tokens
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    async def _run(self) -> None:
        raise NotImplementedError

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by start/stop
            self.failure = exc

    def begin(self, started: Callable[[], bool], timeout_s: float) -> bool:
        """Start the thread; wait until ``started()`` (False, and the load told to stop, if it never
        does within ``timeout_s`` or the thread ends first)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not started() and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.failure is not None or not started():
            self._stop.set()
            return False
        return True

    def halt(self, timeout_s: float) -> None:
        """Stop sending; wait for the requests in flight to end; raise if the load generator failed."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self.failure is not None:
            raise RuntimeError(f"the load generator failed: {self.failure!r}") from self.failure


class ChatLoad(LoadThread):
    """``concurrency`` workers, each sending one conversation of :func:`bench_messages` back to back
    through one :class:`ChatClient` until :meth:`halt`; subclasses write ``_one`` (one request, and
    what they count of it)."""

    async def _one(self, client: ChatClient, messages: list[dict[str, str]]) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        async with ChatClient(self.url, self.concurrency, self.max_tokens) as client:
            async def worker(messages: list[dict[str, str]]) -> None:
                while not self._stop.is_set():
                    await self._one(client, messages)

            await asyncio.gather(*(worker(m) for m in bench_messages(self.concurrency)))


class BackgroundLoad(ChatLoad):
    """Keep ``concurrency`` greedy chat requests in flight against ``url`` until :meth:`stop`."""

    def __init__(self, url: str, concurrency: int, max_tokens: int = 32):
        super().__init__(url, concurrency, max_tokens, "background-load")
        self.sent = self.ok = 0
        self.errors: list[str] = []

    def start(self, timeout_s: float = 30) -> "BackgroundLoad":
        """Start sending; returns once the first requests are on their way (raises if the load
        generator itself failed, instead of leaving the caller waiting for a load that never came)."""
        if not self.begin(lambda: self.sent > 0, timeout_s):
            raise RuntimeError(f"the load generator did not start: {self.failure!r}") from self.failure
        return self

    async def _one(self, client: ChatClient, messages: list[dict[str, str]]) -> None:
        self.sent += 1
        reply = await client.send(messages)
        if reply.error is None:
            self.ok += 1
        else:
            self.errors.append(reply.error)

    def stop(self, timeout_s: float = 300) -> dict[str, Any]:
        """Stop sending; wait for the requests in flight to finish; counts of what was sent."""
        self.halt(timeout_s)
        return {"sent": self.sent, "succeeded": self.ok, "errors": self.errors[:3], "error_count": len(self.errors)}


def retryable(error: str) -> bool:
    """A 5xx or a transport error: the server's fault, worth sending again. A 4xx is the client's."""
    return not error.startswith("HTTP 4")


@dataclass
class LoadReport:
    requests: int = 0
    succeeded: int = 0
    lost: int = 0  # never succeeded, even with retries
    retried: int = 0  # succeeded, but not at the first attempt
    failed_attempts: int = 0  # what a client without retries would have seen as errors
    attempt_errors: Counter = field(default_factory=Counter)  # "HTTP 500", "ConnectError" ...
    longest_s: float = 0.0  # the slowest request, retries included

    def format(self) -> str:
        kinds = ", ".join(f"{kind} x{n}" for kind, n in self.attempt_errors.most_common()) or "none"
        return (f"{self.requests} requests: {self.succeeded} succeeded, {self.lost} lost; {self.retried} needed a retry; "
                f"failed attempts (what a client without retries sees): {self.failed_attempts} ({kinds}); "
                f"slowest request {self.longest_s:.1f} s")


def error_kind(error: str) -> str:
    return error.split(":", 1)[0]


class RetryingLoad(ChatLoad):
    """``concurrency`` workers sending chat requests back to back to ``url`` until :meth:`stop`."""

    def __init__(self, url: str, concurrency: int = 4, max_tokens: int = 16, give_up_s: float = 300,
                 backoff_s: float = 0.5):
        super().__init__(url, concurrency, max_tokens, "retrying-load")
        self.give_up_s, self.backoff_s = give_up_s, backoff_s
        self.report = LoadReport()

    async def _one(self, client: ChatClient, messages: list[dict[str, str]]) -> None:
        report, start = self.report, time.monotonic()
        report.requests += 1
        attempts = 0
        while True:
            attempts += 1
            reply = await client.send(messages)
            if reply.error is None:
                report.succeeded += 1
                report.retried += attempts > 1
                break
            report.failed_attempts += 1
            report.attempt_errors[error_kind(reply.error)] += 1
            if not retryable(reply.error) or time.monotonic() - start > self.give_up_s:
                report.lost += 1
                break
            await asyncio.sleep(self.backoff_s)
        report.longest_s = max(report.longest_s, time.monotonic() - start)

    def start(self, timeout_s: float = 60) -> "RetryingLoad":
        """Start sending; returns once a first request has succeeded."""
        if not self.begin(lambda: self.report.succeeded > 0, timeout_s):
            raise RuntimeError(f"no request succeeded within {timeout_s:g} s: {self.report.format()} {self.failure!r}")
        return self

    def wait_succeeded(self, more: int, timeout_s: float) -> int:
        """Block until ``more`` requests beyond those already counted have succeeded (observed, not a
        fixed pause); returns how many succeeded in all. ``TimeoutError`` with the report if not."""
        target, deadline = self.report.succeeded + more, time.monotonic() + timeout_s
        while self.report.succeeded < target:
            if self.failure is not None:
                raise RuntimeError(f"the load generator stopped: {self.failure!r}") from self.failure
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:g} s for {more} more requests to {self.url} to succeed: "
                                   f"{self.report.format()}")
            time.sleep(0.05)
        return self.report.succeeded

    def stop(self, timeout_s: float = 600) -> LoadReport:
        """Stop sending; wait for the requests in flight (and their retries) to end."""
        self.halt(timeout_s)
        return self.report


@dataclass(frozen=True)
class Record:
    start_s: float
    end_s: float
    status: int  # 0: no HTTP answer (transport error)
    color: str | None
    version: int | None
    retried: bool
    error: str

    @property
    def ok(self) -> bool:
        return self.status == 200


class SteadyLoad(LoadThread):
    """``concurrency`` POSTs of ``{"prompt", "max_tokens"}`` kept in flight against ``url`` until
    :meth:`stop`, every one recorded (:class:`Record`)."""

    def __init__(self, url: str, concurrency: int = 4, prompt: str = "Ray Serve takes", max_tokens: int = 8):
        if concurrency < 1:
            raise ValueError(f"concurrency is {concurrency}: give at least 1")
        super().__init__(url, concurrency, max_tokens, "steady-load")
        self.prompt = prompt
        self.records: list[Record] = []
        self.marks: dict[str, float] = {}
        self._t0 = 0.0

    def now(self) -> float:
        return time.monotonic() - self._t0

    async def _worker(self, client: httpx.AsyncClient) -> None:
        while not self._stop.is_set():
            start = self.now()
            try:
                r = await client.post(self.url, json={"prompt": self.prompt, "max_tokens": self.max_tokens})
                data = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                self.records.append(Record(start, self.now(), r.status_code, data.get("color"), data.get("version"),
                                           bool(data.get("retried")), "" if r.status_code == 200 else str(data.get("error", r.text))[:300]))
            except httpx.HTTPError as exc:
                self.records.append(Record(start, self.now(), 0, None, None, False, f"{type(exc).__name__}: {exc}"))

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            await asyncio.gather(*(self._worker(client) for _ in range(self.concurrency)))

    def start(self, timeout_s: float = 60) -> "SteadyLoad":
        """Start sending; return once the first answer is in (``RuntimeError`` if none comes)."""
        self._t0 = time.monotonic()
        if not self.begin(lambda: bool(self.records), timeout_s):
            raise RuntimeError(f"no answer from {self.url} within {timeout_s} s: {self.failure!r}") from self.failure
        return self

    def wait_for(self, count: int, timeout_s: float) -> None:
        """Block until ``count`` requests have ended."""
        deadline = time.monotonic() + timeout_s
        while len(self.records) < count:
            if self.failure is not None:
                raise RuntimeError(f"the load generator stopped: {self.failure!r}") from self.failure
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.records)} of {count} requests to {self.url} ended in {timeout_s} s")
            time.sleep(0.05)

    def wait_answers(self, count: int, timeout_s: float, since: str | None = None, **match: Any) -> list[Record]:
        """Block until ``count`` requests sent after the mark ``since`` (all, if None) were answered
        (HTTP 200) with every :class:`Record` field in ``match`` (``version=2``, ``retried=True``);
        returns them. A state reached by observation, not by a fixed phase a slow machine misses:
        ``TimeoutError`` says what was awaited and what came instead."""
        start = self.marks[since] if since is not None else float("-inf")
        deadline = time.monotonic() + timeout_s
        while True:
            after = [r for r in list(self.records) if r.start_s >= start]
            found = [r for r in after if r.ok and all(getattr(r, k) == v for k, v in match.items())]
            if len(found) >= count:
                return found
            if self.failure is not None:
                raise RuntimeError(f"the load generator stopped: {self.failure!r}") from self.failure
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:g} s for {count} answers {match or ''} from {self.url}"
                                   f"{f' after {since!r}' if since else ''}: {len(found)} came; of the "
                                   f"{len(after)} requests that ended: {summary(after)}")
            time.sleep(0.05)

    def mark(self, label: str) -> float:
        """Note the time of an event (a switch) on the load's clock."""
        self.marks[label] = self.now()
        return self.marks[label]

    def stop(self, timeout_s: float = 120) -> list[Record]:
        """Stop sending, wait for the requests in flight, return every record in order of start."""
        self.halt(timeout_s)
        return sorted(self.records, key=lambda r: r.start_s)


def summary(records: list[Record]) -> dict:
    """Requests, failures, answers per version and per color, and requests answered after a retry."""
    ok = [r for r in records if r.ok]
    return {"requests": len(records), "failed": len(records) - len(ok),
            "by_version": dict(sorted(Counter(r.version for r in ok).items())),
            "by_color": dict(sorted(Counter(r.color for r in ok).items())),
            "retried": sum(r.retried for r in ok),
            "errors": dict(Counter(r.error.split(":", 1)[0] for r in records if not r.ok))}


def timeline(records: list[Record], bin_s: float = 0.5) -> list[dict]:
    """Per ``bin_s`` of end time: ``{"t": bin start, "ok": {version: answers}, "failed": n}``."""
    if not records:
        return []
    bins = [{"t": i * bin_s, "ok": Counter(), "failed": 0} for i in range(int(max(r.end_s for r in records) // bin_s) + 1)]
    for r in records:
        b = bins[int(r.end_s // bin_s)]
        if r.ok:
            b["ok"][r.version] += 1
        else:
            b["failed"] += 1
    return [b | {"ok": dict(b["ok"])} for b in bins]


def split_within(records: list[Record], color: str, expected_share: float, sigmas: float = 3) -> tuple[bool, float, float]:
    """Whether ``color``'s observed share of the answered requests is within ``sigmas`` binomial
    standard deviations of ``expected_share``; returns (within, observed share, tolerance)."""
    ok = [r for r in records if r.ok]
    if not ok:
        raise ValueError("no answered request to measure a share over")
    share = sum(r.color == color for r in ok) / len(ok)
    tolerance = sigmas * math.sqrt(expected_share * (1 - expected_share) / len(ok))
    return abs(share - expected_share) <= tolerance, share, tolerance
