"""A steady load that records every request: when, which color and version answered, what failed.

:class:`SteadyLoad` keeps ``concurrency`` POSTs in flight against the release router from a thread
with its own event loop, without client retries: a failed request is a failed record, so "0 failed"
means no client saw an error. The pure functions turn the records into the numbers and the plot of
notebook 08.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass

import httpx

from scripts.bench.serve import LoadThread


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
