"""Throughput through Ray Serve against the same Triton called directly, side by side in one run.

``python -m scripts.bench.serve --serve-url http://127.0.0.1:PORT --triton-grpc 127.0.0.1:PORT
--model-repository build/triton_repo/cpu-serve`` sends the same greedy chat requests two ways, at
the same concurrency: straight to a replica's Triton ensemble (gRPC, the prompt rendered with the
chat template as the app renders it), then through Serve's ``/v1/chat/completions``. It counts
errors, generated tokens (Serve's ``usage``, Triton's ``sequence_length``) and whether both ways
gave the same text, and prints the rates and their ratio, then one JSON line.

:class:`BackgroundLoad` keeps N chat requests in flight from a thread until stopped (notebook
05's autoscaling burst).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from scripts.serve.openai_api import chat_prompt
from scripts.model.tiny_llama import chat_examples
from scripts.triton.client import EnsembleRequest, GrpcEnsemble, ensemble_inputs
from scripts.triton.repository.fill import repository_facts


def bench_messages(n: int) -> list[list[dict[str, str]]]:
    """n one-turn conversations: the questions of the chat data, cycled."""
    questions = [conversation[0]["content"] for conversation in chat_examples()]
    return [[{"role": "user", "content": questions[i % len(questions)]}] for i in range(n)]


def _rate(texts: list[str | None], tokens: int, errors: list[str], wall: float) -> dict[str, Any]:
    return {"requests": len(texts), "succeeded": sum(t is not None for t in texts), "tokens": tokens, "wall_s": wall,
            "tok_per_s": tokens / wall if wall > 0 else 0.0, "errors": errors[:3]}


async def run_serve(url: str, conversations: list[list[dict[str, str]]], max_tokens: int, concurrency: int,
                    model: str | None = None) -> tuple[dict[str, Any], list[str | None]]:
    """Greedy ``/v1/chat/completions`` requests, ``concurrency`` in flight; (stats, texts)."""
    gate = asyncio.Semaphore(concurrency)
    texts: list[str | None] = [None] * len(conversations)
    errors: list[str] = []
    tokens = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def one(i: int) -> None:
            nonlocal tokens
            body = {"messages": conversations[i], "max_tokens": max_tokens, "temperature": 0}
            if model:
                body["model"] = model
            async with gate:
                try:
                    r = await client.post("/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
            if r.status_code != 200:
                errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                return
            data = r.json()
            texts[i] = data["choices"][0]["message"]["content"]
            tokens += data["usage"]["completion_tokens"]

        start = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(len(conversations))))
        wall = time.monotonic() - start
    return _rate(texts, tokens, errors, wall), texts


async def run_triton(grpc_url: str, prompts: list[str], max_tokens: int, concurrency: int, vocab_size: int,
                     model: str = "ensemble") -> tuple[dict[str, Any], list[str | None]]:
    """The same requests straight to Triton's ensemble; (stats, texts)."""
    ensemble = GrpcEnsemble(grpc_url, model)
    gate = asyncio.Semaphore(concurrency)
    texts: list[str | None] = [None] * len(prompts)
    errors: list[str] = []
    tokens = 0

    async def one(i: int) -> None:
        nonlocal tokens
        inputs = ensemble_inputs(EnsembleRequest(prompts[i], max_tokens), vocab_size)
        async with gate:
            try:
                chunks = [c async for c in ensemble.generate(inputs)]
            except Exception as exc:  # noqa: BLE001 - Triton's refusals and transport errors: counted, reported
                errors.append(f"{type(exc).__name__}: {exc}")
                return
        texts[i] = "".join(c.text for c in chunks)
        tokens += sum(c.tokens for c in chunks)

    start = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(len(prompts))))
    wall = time.monotonic() - start
    await ensemble.close()
    return _rate(texts, tokens, errors, wall), texts


def bench(serve_url: str, triton_grpc: str, model_repository: str | Path, requests: int = 200, concurrency: int = 32,
          max_tokens: int = 32, rounds: int = 3, warmup: int = 8) -> dict[str, Any]:
    """``rounds`` rounds, each Triton direct then Serve; the ratio reported is the median round's
    (on a small machine one round of a few seconds is at the mercy of whatever else runs)."""
    from transformers import AutoTokenizer  # noqa: PLC0415

    facts = repository_facts(Path(model_repository))
    tokenizer = AutoTokenizer.from_pretrained(facts.tokenizer_dir)
    conversations = bench_messages(requests)
    prompts = [chat_prompt(tokenizer, c) for c in conversations]
    asyncio.run(run_triton(triton_grpc, prompts[:warmup], max_tokens, concurrency, len(tokenizer)))
    asyncio.run(run_serve(serve_url, conversations[:warmup], max_tokens, concurrency))
    runs = []
    for _ in range(rounds):
        triton, triton_texts = asyncio.run(run_triton(triton_grpc, prompts, max_tokens, concurrency, len(tokenizer)))
        serve, serve_texts = asyncio.run(run_serve(serve_url, conversations, max_tokens, concurrency))
        same = sum(a is not None and a == b for a, b in zip(serve_texts, triton_texts))
        runs.append({"triton": triton, "serve": serve, "same_text": same,
                     "ratio": serve["tok_per_s"] / triton["tok_per_s"] if triton["tok_per_s"] else 0.0})
    median = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]
    return {"concurrency": concurrency, "max_tokens": max_tokens, "rounds": rounds, **median,
            "ratios": [r["ratio"] for r in runs],
            "all_succeeded": all(r[w]["succeeded"] == requests for r in runs for w in ("triton", "serve")),
            "all_same_text": all(r["same_text"] == requests for r in runs)}


class BackgroundLoad:
    """Keep ``concurrency`` greedy chat requests in flight against ``url`` until :meth:`stop`."""

    def __init__(self, url: str, concurrency: int, max_tokens: int = 32):
        self.url, self.concurrency, self.max_tokens = url, concurrency, max_tokens
        self.sent = self.ok = 0
        self.errors: list[str] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="background-load", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by start/stop
            self.failure = exc

    def start(self, timeout_s: float = 30) -> "BackgroundLoad":
        """Start sending; returns once the first requests are on their way (raises if the load
        generator itself failed, instead of leaving the caller waiting for a load that never came)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while self.sent == 0 and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.failure is not None or self.sent == 0:
            self._stop.set()
            raise RuntimeError(f"the load generator did not start: {self.failure!r}") from self.failure
        return self

    async def _run(self) -> None:
        conversations = bench_messages(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(base_url=self.url, timeout=600, limits=limits) as client:
            async def worker(messages):
                while not self._stop.is_set():
                    self.sent += 1
                    try:
                        r = await client.post("/v1/chat/completions", json={"messages": messages, "temperature": 0,
                                                                            "max_tokens": self.max_tokens})
                        if r.status_code == 200:
                            self.ok += 1
                        else:
                            self.errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    except httpx.HTTPError as exc:
                        self.errors.append(f"{type(exc).__name__}: {exc}")

            await asyncio.gather(*(worker(m) for m in conversations))

    def stop(self, timeout_s: float = 300) -> dict[str, Any]:
        """Stop sending; wait for the requests in flight to finish; counts of what was sent."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self.failure is not None:
            raise RuntimeError(f"the load generator failed: {self.failure!r}") from self.failure
        return {"sent": self.sent, "succeeded": self.ok, "errors": self.errors[:3], "error_count": len(self.errors)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--serve-url", required=True, help="the Serve application's URL (http://127.0.0.1:PORT)")
    p.add_argument("--triton-grpc", required=True, help="one replica's Triton gRPC address (127.0.0.1:PORT)")
    p.add_argument("--model-repository", required=True, help="the repository the replicas serve")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    result = bench(args.serve_url, args.triton_grpc, args.model_repository, args.requests, args.concurrency,
                   args.max_tokens, args.rounds)
    t, s = result["triton"], result["serve"]
    print(f"{args.requests} greedy chat requests, {args.concurrency} in flight, {args.rounds} rounds (median round shown)")
    print(f"Triton direct (gRPC):       {t['succeeded']}/{t['requests']} ok, {t['tok_per_s']:.0f} output tok/s")
    print(f"Serve /v1/chat/completions: {s['succeeded']}/{s['requests']} ok, {s['tok_per_s']:.0f} output tok/s")
    print(f"same text both ways: {result['same_text']}/{args.requests}; ratio Serve / Triton: {result['ratio']:.2f} "
          f"(rounds: {', '.join(f'{r:.2f}' for r in result['ratios'])})")
    print(json.dumps(result))
    return 0 if result["all_succeeded"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
