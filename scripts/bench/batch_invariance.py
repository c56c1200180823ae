"""The same greedy prompts answered alone and inside a batch, on one Triton: how much of a profile's
greedy output depends on the batch a request joins (notebook 05).

``python -m scripts.bench.batch_invariance --triton-grpc 127.0.0.1:PORT --model-repository
build/triton_repo/cpu-serve --batch 24 --profile cpu`` (or :func:`alone_vs_batch` from Python) takes
the benchmark's chat prompts (``scripts.bench.serve``'s, rendered with the chat template) and asks the
ensemble for each one **alone**, one request in flight, twice; then sends all ``batch`` of them **at
once**, so the engine runs them in one batch (continuous batching takes in whatever is in flight). It
compares token ids (the ensemble's ``output_ids``), not texts:

* alone, twice: a request answered alone must get the same ids every time, on every profile
  (notebooks 04 and 05 hold the reference prompts, each alone, to run.py's ids on the same grounds);
* alone against the batch: equal for every prompt where the profile is ``batch_invariant``; on a GPU in
  16-bit floats the share is what it is, and the profile's ``batch_invariant_reason`` says why.

Serve against Triton direct under load (``scripts.bench.serve``, its "same text both ways") compares two
answers that were each made inside a batch, and different ones: where this share is below 1, that
one can be too.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from scripts.clients.chat import bench_messages
from scripts.model.tokenizer import load_tokenizer
from scripts.serve.openai_api import chat_prompt
from scripts.triton.client import GrpcModel, model_outputs
from scripts.triton.repository.fill import repository_facts
from scripts.triton.sampling import EnsembleRequest, ensemble_inputs


@dataclass
class AloneVsBatch:
    """What one measurement found, per prompt: the ids alone (twice) and inside the batch."""

    batch: int  # prompts sent at once, each also sent alone
    max_tokens: int
    repeatable: int = 0  # prompts whose two answers alone have the same ids
    equal: int = 0  # prompts whose ids inside the batch equal their ids alone
    parted_at: list[int] = field(default_factory=list)  # per prompt that differs: its first token that differs
    errors: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        """The share of the batch's prompts answered as alone."""
        return self.equal / self.batch if self.batch else 0.0

    @property
    def complete(self) -> bool:
        """Every request answered (no share is read from a batch with failures)."""
        return not self.errors

    def format(self) -> str:
        lines = [f"{self.batch} greedy prompts of {self.max_tokens} tokens on one Triton, each alone (twice), "
                 f"then all {self.batch} at once; token ids compared",
                 f"  alone, twice: the same ids for {self.repeatable}/{self.batch}",
                 f"  inside the batch of {self.batch}: the same ids as alone for {self.equal}/{self.batch} "
                 f"(share {self.share:.2f})"]
        if self.parted_at:
            lines[-1] += (f"; the others part from their answer alone at token {min(self.parted_at)} to "
                          f"{max(self.parted_at)} (median {statistics.median(self.parted_at):g})")
        if self.errors:
            lines.append(f"  failed requests: {len(self.errors)}, e.g. {self.errors[0]}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"share": self.share}


def reason(profile: Any) -> str:
    """What the profile says about greedy output inside a batch, and why (``batch_invariant_reason``)."""
    return (f"profile {profile.name}: batch_invariant {str(bool(profile['batch_invariant'])).lower()}: "
            f"{profile['batch_invariant_reason']}")


def first_difference(a: list[int], b: list[int]) -> int:
    """The index of the first token where ``a`` and ``b`` differ (the shorter one's length where one
    is the other's start); ``a`` and ``b`` must differ."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) == len(b):
        raise ValueError("the two answers are equal")
    return min(len(a), len(b))


async def answer_ids(model: Any, prompt: str, max_tokens: int, vocab_size: int) -> list[int]:
    """The generated ids of one greedy request (not streamed: one response; streamed, the responses joined)."""
    ids: list[int] = []
    async for chunk in model.generate(ensemble_inputs(EnsembleRequest(prompt, max_tokens), vocab_size)):
        if chunk.ids is None:
            raise ValueError("the model returns no output_ids: compare ids on a model that declares them")
        ids.extend(chunk.ids)
    return ids


async def measure(model: Any, prompts: list[str], max_tokens: int, vocab_size: int) -> AloneVsBatch:
    """Each prompt alone, twice, then all at once, on ``model`` (a :class:`GrpcModel` or a fake of one)."""
    result = AloneVsBatch(batch=len(prompts), max_tokens=max_tokens)

    async def one(prompt: str) -> list[int] | None:
        try:
            return await answer_ids(model, prompt, max_tokens, vocab_size)
        except Exception as exc:  # noqa: BLE001 - Triton's refusals and transport errors: counted, reported
            result.errors.append(f"{type(exc).__name__}: {exc}")
            return None

    alone = [[await one(p) for p in prompts] for _ in range(2)]  # one request in flight at a time
    together = await asyncio.gather(*(one(p) for p in prompts))
    for first, second, inside in zip(*alone, together):
        if first is None or second is None or inside is None:
            continue
        result.repeatable += first == second
        if inside == first:
            result.equal += 1
        else:
            result.parted_at.append(first_difference(first, inside))
    return result


def bench_prompts(tokenizer: Any, batch: int) -> list[str]:
    """The benchmark's chat prompts (``scripts.bench.serve``), rendered as the Serve app renders them."""
    return [chat_prompt(tokenizer, conversation) for conversation in bench_messages(batch)]


def alone_vs_batch(triton_grpc: str, model_repository: str | Path, batch: int = 24, max_tokens: int = 32,
                   model_name: str = "ensemble", open_model: Callable[..., Any] = GrpcModel) -> AloneVsBatch:
    """:func:`measure` on ``model_name`` of the Triton at ``triton_grpc`` with ``batch`` of the benchmark's
    prompts. It runs an event loop of its own: where one runs already (Jupyter), call it from a thread."""
    repo = Path(model_repository)
    tokenizer = load_tokenizer(repository_facts(repo).tokenizer_dir)
    model = open_model(triton_grpc, model_name, outputs=model_outputs(repo, model_name))

    async def run() -> AloneVsBatch:
        try:
            return await measure(model, bench_prompts(tokenizer, batch), max_tokens, len(tokenizer))
        finally:
            await model.close()

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--triton-grpc", required=True, help="a Triton's gRPC address (127.0.0.1:PORT)")
    p.add_argument("--model-repository", required=True, help="the repository that Triton serves")
    p.add_argument("--batch", type=int, default=24, help="prompts sent at once (each also sent alone)")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--profile", help="print what this profile says about batch invariance")
    args = p.parse_args(argv)
    result = alone_vs_batch(args.triton_grpc, args.model_repository, args.batch, args.max_tokens)
    print(result.format())
    if args.profile:
        from scripts.profiles import load_profile  # noqa: PLC0415

        print(reason(load_profile(args.profile)))
    print(json.dumps(result.as_dict()))
    return 0 if result.complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
