"""The benchmark's plan: which targets, at which concurrencies, how many prompts, how often.

Every target gets the same runs, in an order that interleaves them (repeat, then concurrency,
then target) so that a slow minute of a shared machine does not fall on one target alone. A run
sends ``prompts_per_stream`` prompts per concurrent stream (at least ``min_prompts``): at
concurrency 1 a handful of sequential requests, at 32 enough to keep 32 in flight for a while.
:func:`scripts.bench.vllm_bench.run_plan` executes the plan (``vllm bench serve`` for the OpenAI
targets, :mod:`scripts.bench.triton_stream` for Triton's own route).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from scripts.bench.vllm_bench import TRITON_BACKENDS, check_run

#: What a target speaks: the two OpenAI routes, or Triton's generate_stream on a text model.
KINDS = {"completions": ("openai", "/v1/completions"), "chat": ("openai-chat", "/v1/chat/completions"),
         "triton-ensemble": ("triton-ensemble", "/v2/models/ensemble/generate_stream"),
         "triton-vllm_model": ("triton-vllm_model", "/v2/models/vllm_model/generate_stream")}


@dataclass(frozen=True)
class Target:
    """One thing to measure: a label for tables, where it listens, what it speaks, the model name it wants."""

    label: str
    base_url: str
    kind: str = "completions"
    model: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"target {self.label!r}: kind must be one of {sorted(KINDS)}, got {self.kind!r}")


def prompts_for(concurrency: int, prompts_per_stream: int, min_prompts: int = 8) -> int:
    """How many prompts a run at ``concurrency`` sends."""
    if concurrency < 1 or prompts_per_stream < 1:
        raise ValueError(f"concurrency and prompts_per_stream must be at least 1, got {concurrency} and {prompts_per_stream}")
    return max(min_prompts, prompts_per_stream * concurrency)


def plan(targets: Iterable[Target], concurrencies: Iterable[int], *, served_model: str, tokenizer: str,
         input_len: int, output_len: int, repeats: int = 1, prompts_per_stream: int = 4, min_prompts: int = 8,
         seed: int = 0, warmup_prompts: int = 4, extra_body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The runs of a sweep, interleaved: for each repeat, each concurrency, each target. It opens
    with a warm-up run per target (``warmup_prompts`` prompts, one at a time, ``repeat`` -1: connections
    made, first-request costs paid; :func:`measured` drops them); 0 warm-up prompts: none.
    ``extra_body``: more request fields for every run (``{"stream_interval": 4}``)."""
    targets, concurrencies = list(targets), sorted(set(int(c) for c in concurrencies))
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise ValueError(f"target labels must differ: {labels}")
    if repeats < 1 or not targets or not concurrencies:
        raise ValueError("a plan needs at least one target, one concurrency and one repeat")
    runs = []
    for repeat in ([-1] if warmup_prompts > 0 else []) + list(range(repeats)):
        for concurrency in concurrencies:
            for target in targets:
                backend, endpoint = KINDS[target.kind]
                model = target.model or (endpoint.split("/")[3] if backend in TRITON_BACKENDS else served_model)
                runs.append(check_run({
                    "label": target.label, "base_url": target.base_url.rstrip("/"), "endpoint": endpoint,
                    "backend": backend, "model": model, "tokenizer": str(tokenizer), "concurrency": concurrency,
                    "num_prompts": prompts_for(concurrency, prompts_per_stream, min_prompts), "input_len": input_len,
                    "output_len": output_len, "seed": seed, "repeat": repeat, "extra_body": extra_body}))
                if repeat < 0:  # one warm-up run per target, at the lowest concurrency
                    runs[-1] |= {"concurrency": 1, "num_prompts": warmup_prompts}
            if repeat < 0:
                break
    return runs


def measured(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a plan's result without its warm-up runs."""
    return [row for row in rows if int(row.get("repeat", 0)) >= 0]


def smoke_settings(concurrency: Iterable[int], repeats: int, prompts_per_stream: int,
                   smoke: bool) -> tuple[list[int], int, int]:
    """``(concurrencies, repeats, prompts_per_stream)`` for a run; ``smoke`` keeps the two lowest
    concurrencies (at most 8), one repeat and two prompts per stream, so the whole path is exercised
    in a fraction of the time (``make test``, ``make run``)."""
    levels = sorted(set(int(c) for c in concurrency))
    if not levels or levels[0] < 1:
        raise ValueError(f"CONCURRENCY needs at least one value >= 1, got {list(concurrency)}")
    if repeats < 1 or prompts_per_stream < 1:
        raise ValueError(f"REPEATS and PROMPTS_PER_STREAM must be at least 1, got {repeats} and {prompts_per_stream}")
    if not smoke:
        return levels, repeats, prompts_per_stream
    return ([c for c in levels if c <= 8][:2] or levels[:1]), 1, min(prompts_per_stream, 2)


def stream_interval_body(interval: int) -> dict[str, Any] | None:
    """The request fields that ask every target for ``interval`` new tokens per streamed chunk (vLLM's
    ``stream_interval``, which ``vllm serve`` and this repository's Serve app and Triton models accept);
    None for 1 (every token, the default)."""
    from scripts.triton.backend.engine_stream import MAX_STREAM_INTERVAL  # noqa: PLC0415

    if isinstance(interval, bool) or not isinstance(interval, int) or not 1 <= interval <= MAX_STREAM_INTERVAL:
        raise ValueError(f"STREAM_INTERVAL must be an integer from 1 to {MAX_STREAM_INTERVAL} tokens, got {interval!r}")
    return {"stream_interval": interval} if interval > 1 else None


def bench_parser(doc: str):
    """A side-by-side bench's command line (``argparse``): its docstring's first paragraph, ``--profile``
    and the load options: the concurrencies, the prompt and answer lengths, the repeats and the prompts per
    stream (:func:`load_settings` reads them)."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32])
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompts-per-stream", type=int, default=4)
    return parser


def bench_out_dir(out: Path | None, name: str, profile_name: str) -> Path:
    """A side-by-side bench's results folder, made: ``--out`` when given, else build/results/bench/<name>-<profile>."""
    from scripts.paths import build_dir  # noqa: PLC0415

    out_dir = (out or build_dir() / "results" / "bench" / f"{name}-{profile_name}").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def load_settings(args) -> dict[str, Any]:
    """The keyword arguments of a bench's ``run`` from :func:`bench_parser`'s load options."""
    return {"input_len": args.input_len, "output_len": args.output_len, "repeats": args.repeats,
            "prompts_per_stream": args.prompts_per_stream}


@contextmanager
def ensemble_triton(repo: Path, profile, timeout_s: float = 600, name: str = "") -> Iterator[Any]:
    """A side-by-side bench's Triton: ``repo``'s ensemble and the models it is made of, loaded as the
    profile loads engines (one at a time on one GPU), started, said ready with its start-up time (after
    ``name``), and stopped when the block ends, also when it fails to start."""
    from scripts.engine.config import triton_load_args  # noqa: PLC0415
    from scripts.triton.server import TritonServer  # noqa: PLC0415

    triton = TritonServer(repo, extra_args=("--model-control-mode=explicit", "--load-model=ensemble",
                                            *triton_load_args(profile)))
    started = time.monotonic()
    try:
        triton.start(timeout_s=timeout_s)
        print(f"{name + ': ' if name else ''}Triton ready after {time.monotonic() - started:.0f} s", flush=True)
        yield triton
    finally:
        triton.stop()
