"""A generation request's settings as Triton input tensors, one mapping for both ways in.

:class:`EnsembleRequest` is what a client asks (prompt, length, sampling, stop strings) in client
terms. :func:`ensemble_inputs` turns it into the ensemble's tensors (text in, the preprocessing
model tokenizes); :func:`engine_inputs` into the engine model's (token ids in, as the ensemble's
preprocessing model would make them), for a client that calls the engine model itself (the Serve
application with ``triton_model="engine"``). Both take the sampling settings from
:func:`sampling_values`, which knows how TensorRT-LLM reads them; only the tensor names differ
(the ensemble's ``top_k``/``top_p``, the engine's ``runtime_top_k``/``runtime_top_p``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from scripts.triton.backend.request_handling import to_word_list_format

if TYPE_CHECKING:
    from scripts.triton.engine_request import EngineInputs

#: TensorRT-LLM reads top_k 0 with top_p 0 or 1 as greedy, whatever the temperature. OpenAI's
#: temperature > 0 with top_p 1 means sampling from the whole distribution, so such requests get
#: the largest top_k TensorRT-LLM accepts (or the vocabulary size, if smaller).
MAX_TOP_K = 1024
#: NumPy dtypes of the ensemble's sampling inputs (model_repository/ensemble/config.pbtxt).
ENSEMBLE_DTYPES = {"temperature": np.float32, "top_p": np.float32, "top_k": np.int32, "random_seed": np.uint64,
                   "presence_penalty": np.float32, "frequency_penalty": np.float32}


@dataclass
class EnsembleRequest:
    """What the model is asked, in client terms (the ensemble's inputs; :func:`engine_inputs` sends
    the same to the engine model)."""

    prompt: str
    max_tokens: int
    stream: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False  # generate max_tokens whatever the model says (benchmarks, drain tests)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


def sampling_values(req: EnsembleRequest, vocab_size: int, top_k: str = "top_k",
                    top_p: str = "top_p") -> dict[str, float | int]:
    """``{input name: value}`` of the sampling settings a request sends (none: greedy);
    ``top_k``/``top_p``: the names the model gives those two inputs."""
    values: dict[str, float | int] = {}
    if req.temperature > 0:
        values["temperature"] = req.temperature
        if req.top_p < 1:
            values[top_p] = req.top_p
        else:
            values[top_k] = min(MAX_TOP_K, vocab_size)
    if req.seed is not None:
        values["random_seed"] = req.seed
    if req.presence_penalty:
        values["presence_penalty"] = req.presence_penalty
    if req.frequency_penalty:
        values["frequency_penalty"] = req.frequency_penalty
    return values


def ensemble_inputs(req: EnsembleRequest, vocab_size: int) -> dict[str, np.ndarray]:
    """The ensemble's input tensors for one request (batch of one, as the configs declare)."""
    inputs: dict[str, np.ndarray] = {
        "text_input": np.array([[req.prompt.encode("utf-8")]], dtype=np.object_),
        "max_tokens": np.array([[req.max_tokens]], dtype=np.int32),
        "stream": np.array([[req.stream]], dtype=bool),
    }
    if req.stop:
        inputs["stop_words"] = np.array([[s.encode("utf-8") for s in req.stop]], dtype=np.object_)
    for name, value in sampling_values(req, vocab_size).items():
        inputs[name] = np.array([[value]], dtype=ENSEMBLE_DTYPES[name])
    if req.ignore_eos:  # no end id: TensorRT-LLM's convention, which the vLLM and transformers engines follow
        inputs["end_id"] = np.array([[-1]], dtype=np.int32)
    return inputs


def engine_inputs(engine: "EngineInputs", req: EnsembleRequest, prompt_ids: list[int], tokenizer: Any,
                  vocab_size: int) -> dict[str, np.ndarray]:
    """The engine model's tensors for a request, as the ensemble's preprocessing model would make
    them (end and pad ids, stop words as token ids) plus the sampling settings of
    :func:`ensemble_inputs`; always streamed (new tokens per response). ``prompt_ids``: the prompt as
    ``tokenizer`` encodes it."""
    optional: dict[str, Any] = engine.end_and_pad(tokenizer, req.ignore_eos)
    if req.stop:
        optional["stop_words_list"] = to_word_list_format([[tokenizer(w, add_special_tokens=False)["input_ids"]
                                                            for w in req.stop]])
    values = sampling_values(req, vocab_size, top_k="runtime_top_k", top_p="runtime_top_p")
    optional.update({name: [value] for name, value in values.items()})
    return engine.build(prompt_ids, req.max_tokens, streaming=True, **optional)
