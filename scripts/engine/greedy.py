"""A layer's greedy answer held against run.py's reference (notebook 03), the same way in notebooks 04 and 05.

Token ids are compared where the layer returns ids (the engine model; the ensemble's ``output_ids``).
A text is compared only with the reference ids decoded by :func:`scripts.model.tokenizer.decode_ids`,
the decode every layer uses, so texts differ only where ids do, not where two decoders treat an
unfinished character differently. Each prompt is sent alone, one request in flight: answered alone,
the same engine settings give the same ids on every profile. Inside a batch of other requests a GPU's
16-bit kernels may not (the profile's ``batch_invariant``): :mod:`scripts.bench.batch_invariance`
measures that.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scripts.model.tokenizer import decode_ids


def reference_text(tokenizer: Any, row: dict[str, Any]) -> str:
    """The text a layer must answer for one reference prompt: its ids, decoded as every layer decodes them."""
    return decode_ids(tokenizer, row["output_ids"])


def generate_ids(body: dict[str, Any]) -> list[int] | None:
    """The generated token ids in a Triton ``generate`` response (JSON): beam 0 of ``output_ids`` up to
    ``sequence_length``, so an engine's ``-1`` padding is cut off. None where the model returns no ids
    (TensorRT-LLM's stock ensemble declares none; this repository's does)."""
    if body.get("output_ids") is None:
        return None
    ids = np.asarray(body["output_ids"]).reshape(-1)
    if body.get("sequence_length") is not None:
        ids = ids[: int(np.asarray(body["sequence_length"]).reshape(-1)[0])]
    return [int(i) for i in ids]


@dataclass(frozen=True)
class Answer:
    """One layer's answer to one reference prompt: what that layer returns, None where it does not."""

    ids: list[int] | None = None  # token ids (the engine model, the ensemble)
    text: str | None = None  # text (the ensemble, Serve)
    tokens: int | None = None  # a count of generated tokens (Serve's usage)


def differences(row: dict[str, Any], answer: Answer, tokenizer: Any) -> list[str]:
    """What of ``answer`` differs from the reference ``row`` (empty: it reproduces it): ``"ids"``, ``"text"``,
    ``"tokens"``. An answer that carries nothing to compare is refused (a check of nothing always passes)."""
    if answer.ids is None and answer.text is None and answer.tokens is None:
        raise ValueError("the answer carries no ids, text or token count to compare with the reference")
    found = []
    if answer.ids is not None and list(answer.ids) != list(row["output_ids"]):
        found.append("ids")
    if answer.text is not None and answer.text != reference_text(tokenizer, row):
        found.append("text")
    if answer.tokens is not None and answer.tokens != len(row["output_ids"]):
        found.append("tokens")
    return found


def reproduces(row: dict[str, Any], answer: Answer, tokenizer: Any) -> bool:
    """Whether ``answer`` reproduces the reference ``row``: everything it carries is equal."""
    return not differences(row, answer, tokenizer)
