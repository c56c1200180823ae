"""Triton's ``generate_stream`` under load, measured as ``vllm bench serve`` measures an OpenAI server.

``vllm bench serve`` speaks OpenAI's routes only (vllm 0.32: ``vllm/benchmarks/lib/
endpoint_request_func.py``, ``ASYNC_REQUEST_FUNCS``; its TensorRT-LLM backend is gone), so Triton's
own HTTP route is driven from here, with the same prompts (vLLM's ``RandomDataset``, same seed) and
the same numbers: time to first token (the first event that carries text), the gaps between events
(inter-token latency), end to end, and output tokens per second over the run.

Two of the repository's models take text: the ``ensemble`` (``text_input``, ``max_tokens``,
``end_id`` -1 so that every request makes its full length, as ``--ignore-eos`` does for vLLM) and
the standalone ``vllm_model`` (the official vLLM backend's inputs: ``sampling_parameters`` JSON
with ``ignore_eos``). Tokens are counted from the ensemble's ``sequence_length``; the standalone
model returns text only, and with ``ignore_eos`` each successful request made ``output_len``.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The models this load generator knows how to ask (generate_stream bodies differ).
KINDS = ("ensemble", "vllm_model")


@dataclass
class RequestRecord:
    ok: bool
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    tokens: int = 0
    error: str = ""


def stream_body(kind: str, prompt: str, output_len: int, stream_interval: int | None = None) -> dict[str, Any]:
    """The ``generate_stream`` JSON body for one request to a model of ``kind``; ``stream_interval``
    (vLLM's tokens per streamed response) as a request parameter (the generate extension passes body
    fields that are not inputs on as parameters) or, for ``vllm_model``, a sampling parameter."""
    if kind == "ensemble":
        extra = {"stream_interval": stream_interval} if stream_interval else {}
        return {"text_input": prompt, "max_tokens": output_len, "end_id": -1, "stream": True, **extra}
    if kind == "vllm_model":
        sampling = {"max_tokens": output_len, "ignore_eos": True, "temperature": 0}
        sampling |= {"stream_interval": stream_interval} if stream_interval else {}
        return {"text_input": prompt, "stream": True, "exclude_input_in_output": True,
                "sampling_parameters": json.dumps(sampling)}
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


async def one_request(session: Any, url: str, kind: str, prompt: str, output_len: int,
                      stream_interval: int | None = None) -> RequestRecord:
    """One streamed request; its timings, or the error Triton sent (an ``error`` event or a status)."""
    start = time.perf_counter()
    last, ttft, itl, tokens = start, 0.0, [], 0
    try:
        async with session.post(url, json=stream_body(kind, prompt, output_len, stream_interval)) as response:
            if response.status != 200:
                return RequestRecord(False, error=f"HTTP {response.status}: {(await response.text())[:200]}")
            async for raw in response.content:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    return RequestRecord(False, error=str(event["error"])[:200])
                now = time.perf_counter()
                if not event.get("text_output"):
                    continue
                if ttft == 0.0:
                    ttft = now - start
                else:
                    itl.append(now - last)
                last = now
                length = event.get("sequence_length")
                tokens += int(np.asarray(length).reshape(-1)[0]) if length is not None else 0
    except Exception as exc:  # noqa: BLE001 - connection errors are counted as failed requests
        return RequestRecord(False, error=f"{type(exc).__name__}: {exc}"[:200])
    return RequestRecord(True, ttft, time.perf_counter() - start, itl, tokens or output_len)


async def run_load(base_url: str, kind: str, prompts: list[str], output_len: int, concurrency: int,
                   model: str | None = None, stream_interval: int | None = None) -> tuple[list[RequestRecord], float]:
    """All ``prompts`` against ``base_url``'s ``generate_stream``, ``concurrency`` in flight; (records, seconds)."""
    import aiohttp  # noqa: PLC0415 - Ray's dependency; only the load generator needs it

    url = f"{base_url.rstrip('/')}/v2/models/{model or kind}/generate_stream"
    gate = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def gated(prompt: str) -> RequestRecord:
            async with gate:
                return await one_request(session, url, kind, prompt, output_len, stream_interval)

        start = time.perf_counter()
        records = await asyncio.gather(*(gated(p) for p in prompts))
        return list(records), time.perf_counter() - start


def summarize(records: list[RequestRecord], duration_s: float) -> dict[str, Any]:
    """The numbers of a run, under the names of ``vllm bench serve``'s result file
    (``vllm/benchmarks/serve.py``, ``benchmark``)."""
    ok = [r for r in records if r.ok]
    tokens = sum(r.tokens for r in ok)
    out: dict[str, Any] = {"completed": len(ok), "failed": len(records) - len(ok), "duration": duration_s,
                           "total_output_tokens": tokens,
                           "output_throughput": tokens / duration_s if duration_s > 0 else 0.0,
                           "request_throughput": len(ok) / duration_s if duration_s > 0 else 0.0,
                           "errors": sorted({r.error for r in records if not r.ok})[:3]}
    series = {"ttft": [r.ttft_s for r in ok], "e2el": [r.e2e_s for r in ok], "itl": [g for r in ok for g in r.itl_s]}
    for name, values in series.items():
        for label, q in (("median", 50), ("p99", 99)):
            out[f"{label}_{name}_ms"] = float(np.percentile(values, q)) * 1000 if values else 0.0
    return out


def bench(run: dict[str, Any], args: Any) -> dict[str, Any]:
    """One run of a plan (:mod:`scripts.bench.vllm_bench`) against Triton: the prompts of vLLM's own
    dataset code for the same arguments (``args``: what ``vllm bench serve`` parsed for this run), so
    Triton gets exactly the prompts the OpenAI targets got; returns vLLM's result keys."""
    from vllm.benchmarks.datasets import get_samples  # noqa: PLC0415 - the plan's child process has vLLM loaded
    from vllm.tokenizers import get_tokenizer  # noqa: PLC0415

    args.random_input_len, args.random_output_len = args.input_len, args.output_len  # as vLLM's main_async maps them
    samples = get_samples(args, get_tokenizer(args.tokenizer))
    kind = run["backend"].removeprefix("triton-")
    interval = (run.get("extra_body") or {}).get("stream_interval")
    records, duration = asyncio.run(run_load(run["base_url"], kind, [s.prompt for s in samples], int(run["output_len"]),
                                             int(run["concurrency"]), run["model"], interval))
    return summarize(records, duration)
