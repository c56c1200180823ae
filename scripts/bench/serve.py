"""Throughput through Ray Serve against the same Triton called directly, side by side in one run.

``python -m scripts.bench.serve --serve-url http://127.0.0.1:PORT --triton-grpc 127.0.0.1:PORT
--model-repository build/triton_repo/cpu-serve`` (or :func:`serve_vs_triton` from Python) sends the
same greedy chat requests two ways, at the same concurrency: straight to a replica's Triton
ensemble (gRPC, the prompt rendered with the chat template as the app renders it), then through
Serve's ``/v1/chat/completions``. It counts errors, generated tokens (Serve's ``usage``, Triton's
``sequence_length``) and whether both ways gave the same text, and prints each round as it ends,
then the rates and their ratio; the command line ends with one JSON line. The Serve requests go
through :class:`scripts.clients.chat.ChatClient`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any, Callable

from scripts.clients.chat import ChatClient, Reply, bench_messages
from scripts.model.tokenizer import load_tokenizer
from scripts.serve.openai_api import chat_prompt
from scripts.triton.client import GrpcModel
from scripts.triton.repository.fill import repository_facts
from scripts.triton.sampling import EnsembleRequest, ensemble_inputs


def _rate(texts: list[str | None], tokens: int, errors: list[str], wall: float) -> dict[str, Any]:
    return {"requests": len(texts), "succeeded": sum(t is not None for t in texts), "tokens": tokens, "wall_s": wall,
            "tok_per_s": tokens / wall if wall > 0 else 0.0, "errors": errors[:3]}


async def run_serve(url: str, conversations: list[list[dict[str, str]]], max_tokens: int, concurrency: int,
                    model: str | None = None) -> tuple[dict[str, Any], list[str | None]]:
    """Greedy ``/v1/chat/completions`` requests, ``concurrency`` in flight; (stats, texts)."""
    gate = asyncio.Semaphore(concurrency)
    async with ChatClient(url, concurrency, max_tokens, model) as client:
        async def one(messages: list[dict[str, str]]) -> Reply:
            async with gate:
                return await client.send(messages)

        start = time.monotonic()
        replies = await asyncio.gather(*(one(m) for m in conversations))
        wall = time.monotonic() - start
    texts = [r.text for r in replies]
    return _rate(texts, sum(r.tokens for r in replies), [r.error for r in replies if r.error], wall), texts


async def run_triton(grpc_url: str, prompts: list[str], max_tokens: int, concurrency: int, vocab_size: int,
                     model: str = "ensemble") -> tuple[dict[str, Any], list[str | None]]:
    """The same requests straight to Triton's ensemble; (stats, texts)."""
    ensemble = GrpcModel(grpc_url, model)
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


def serve_vs_triton(serve_url: str, triton_grpc: str, model_repository: str | Path, requests: int = 200,
                    concurrency: int = 32, max_tokens: int = 32, rounds: int = 3, warmup: int = 8,
                    log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """``rounds`` rounds, each Triton direct then Serve; the ratio reported is the median round's
    (on a small machine one round of a few seconds is at the mercy of whatever else runs).

    ``log`` gets a line as each round ends and the summary at the end (``None``: quiet). It runs
    an event loop of its own: where one runs already (Jupyter), call it from a thread
    (``await asyncio.to_thread(serve_vs_triton, ...)``).
    """
    tokenizer = load_tokenizer(repository_facts(Path(model_repository)).tokenizer_dir)
    conversations = bench_messages(requests)
    prompts = [chat_prompt(tokenizer, c) for c in conversations]
    return asyncio.run(_serve_vs_triton(serve_url, triton_grpc, conversations, prompts, len(tokenizer), concurrency,
                                        max_tokens, rounds, warmup, log or (lambda _line: None)))


async def _serve_vs_triton(serve_url: str, triton_grpc: str, conversations: list[list[dict[str, str]]],
                           prompts: list[str], vocab_size: int, concurrency: int, max_tokens: int, rounds: int,
                           warmup: int, say: Callable[[str], None]) -> dict[str, Any]:
    requests = len(conversations)
    await run_triton(triton_grpc, prompts[:warmup], max_tokens, concurrency, vocab_size)
    await run_serve(serve_url, conversations[:warmup], max_tokens, concurrency)
    runs = []
    for n in range(1, rounds + 1):
        triton, triton_texts = await run_triton(triton_grpc, prompts, max_tokens, concurrency, vocab_size)
        serve, serve_texts = await run_serve(serve_url, conversations, max_tokens, concurrency)
        same = sum(a is not None and a == b for a, b in zip(serve_texts, triton_texts))
        runs.append({"triton": triton, "serve": serve, "same_text": same,
                     "ratio": serve["tok_per_s"] / triton["tok_per_s"] if triton["tok_per_s"] else 0.0})
        say(f"round {n}/{rounds}: Triton {triton['tok_per_s']:.0f} tok/s, Serve {serve['tok_per_s']:.0f} tok/s, "
            f"ratio {runs[-1]['ratio']:.2f}, same text {same}/{requests}")
    median = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]
    result = {"concurrency": concurrency, "max_tokens": max_tokens, "rounds": rounds, **median,
              "ratios": [r["ratio"] for r in runs],
              "all_succeeded": all(r[w]["succeeded"] == requests for r in runs for w in ("triton", "serve")),
              "all_same_text": all(r["same_text"] == requests for r in runs)}
    say(summary(result, requests))
    return result


def summary(result: dict[str, Any], requests: int) -> str:
    """The median round of :func:`serve_vs_triton`'s result, in four lines."""
    t, s = result["triton"], result["serve"]
    return "\n".join([
        f"{requests} greedy chat requests, {result['concurrency']} in flight, {result['rounds']} rounds (median round shown)",
        f"Triton direct (gRPC):       {t['succeeded']}/{t['requests']} ok, {t['tok_per_s']:.0f} output tok/s",
        f"Serve /v1/chat/completions: {s['succeeded']}/{s['requests']} ok, {s['tok_per_s']:.0f} output tok/s",
        f"same text both ways: {result['same_text']}/{requests}; ratio Serve / Triton: {result['ratio']:.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in result['ratios'])})"])


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
    result = serve_vs_triton(args.serve_url, args.triton_grpc, args.model_repository, args.requests, args.concurrency,
                     args.max_tokens, args.rounds, log=lambda line: print(line, flush=True))
    print(json.dumps(result))
    return 0 if result["all_succeeded"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
