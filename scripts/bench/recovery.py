"""Failures under load: a client that retries, the time Serve takes to replace a replica, the
memory of every process of the stack (notebook 05's recovery section, ``make test-full``).

:class:`RetryingLoad` keeps N greedy chat requests in flight from a thread, as a production client
would send them: a request that fails with a 5xx or a transport error is sent again, with a short
back-off, until it succeeds or ``give_up_s`` passes; a 4xx is not retried (the request is wrong,
not the server). Its report says what a client *without* retries would have seen (every failed
attempt) and what this one lost (requests that never succeeded).

:func:`watch_replacement` polls ``serve.status()`` after a failure was caused: when Serve noticed
(fewer running replicas, or the deployment no longer HEALTHY) and when it was whole again.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from scripts.bench.serve import ChatClient, LoadThread, bench_messages
from scripts.lab.serve_state import app_state


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


class RetryingLoad(LoadThread):
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

    async def _run(self) -> None:
        async with ChatClient(self.url, self.concurrency, self.max_tokens) as client:
            async def worker(messages: list[dict[str, str]]) -> None:
                while not self._stop.is_set():
                    await self._one(client, messages)

            await asyncio.gather(*(worker(m) for m in bench_messages(self.concurrency)))

    def start(self, timeout_s: float = 60) -> "RetryingLoad":
        """Start sending; returns once a first request has succeeded."""
        if not self.begin(lambda: self.report.succeeded > 0, timeout_s):
            raise RuntimeError(f"no request succeeded within {timeout_s:g} s: {self.report.format()} {self.failure!r}")
        return self

    def stop(self, timeout_s: float = 600) -> LoadReport:
        """Stop sending; wait for the requests in flight (and their retries) to end."""
        self.halt(timeout_s)
        return self.report


@dataclass
class Replacement:
    detected_s: float  # from the failure until Serve counted the replica out
    recovered_s: float  # from the failure until the deployment was whole and HEALTHY again
    states: list[str]  # each distinct state seen, in order

    def format(self) -> str:
        return (f"Serve noticed after {self.detected_s:.1f} s and was whole again after {self.recovered_s:.1f} s; "
                f"states seen: {' -> '.join(self.states)}")


def watch_replacement(app: str, replicas: int, since: float, timeout_s: float = 300, poll_s: float = 0.25,
                      status_fn: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep) -> Replacement:
    """Poll until Serve has noticed a failure caused at ``since`` (``clock()`` time) and runs
    ``replicas`` HEALTHY replicas again; :class:`TimeoutError` with the states seen otherwise."""
    if status_fn is None:
        from ray import serve  # noqa: PLC0415 - heavy; unit tests pass status_fn

        status_fn = serve.status
    states: list[str] = []
    detected = None
    while clock() - since < timeout_s:
        state = app_state(status_fn(), app)
        seen = f"{state.deployment_status} ({', '.join(f'{k} {v}' for k, v in sorted(state.replicas.items()))})"
        if not states or states[-1] != seen:
            states.append(seen)
        whole = state.deployment_status == "HEALTHY" and state.running == replicas and state.not_ready == 0
        if detected is None and not whole:
            detected = clock() - since
        elif detected is not None and whole:
            return Replacement(detected, clock() - since, states)
        sleep(poll_s)
    raise TimeoutError(f"no replacement within {timeout_s:g} s; states seen: {' -> '.join(states)}")


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def rss_table(processes: Iterable[tuple[str, int]]) -> dict[str, int]:
    """``{"name (pid)": resident bytes}`` for the (name, pid) pairs given."""
    return {f"{name} ({pid})": rss_bytes(pid) for name, pid in processes}
