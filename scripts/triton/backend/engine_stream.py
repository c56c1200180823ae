"""The vLLM engine model's side of a request (scripts.triton.backend.vllm_backend): sampling parameters
from JSON, the per-request stream interval, the GPU an instance sees, and chunks of streamed tokens.

Pure functions, unit-tested without a server; ``ValueError`` means bad client input (HTTP 400).
"""
from __future__ import annotations

import json
from typing import Any, Sequence


SAMPLING_KEYS = {"max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stop_token_ids",
                 "ignore_eos", "repetition_penalty", "presence_penalty", "frequency_penalty", "n", "min_tokens",
                 "logit_bias", "skip_special_tokens", "stream_interval"}
#: Largest stream_interval a request may ask for (new tokens per streamed response; a chunk of tokens,
#: more buys nothing): the engine models check it here, the Serve app (scripts.serve.openai_api) and
#: the benchmark sweep import it.
MAX_STREAM_INTERVAL = 1024


def stream_interval(parameters_json: str | None) -> int | None:
    """``stream_interval`` from a Triton request's parameters (``request.parameters()``, a JSON object):
    vLLM's per-request ``SamplingParams.stream_interval`` (vllm 0.32 ``vllm/sampling_params.py``: new
    tokens per streamed output; the first and the last are sent at once). None when absent."""
    if not parameters_json:
        return None
    value = json.loads(parameters_json).get("stream_interval")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STREAM_INTERVAL:
        raise ValueError(f"the request parameter stream_interval must be an integer from 1 to {MAX_STREAM_INTERVAL}, "
                         f"got {value!r}")
    return value


def token_out_sampling(sampling: dict[str, Any], interval: int | None) -> dict[str, Any]:
    """vLLM ``SamplingParams`` keywords for a request answered with token ids (the engine model): with
    ``stream_interval`` where asked, and ``detokenize=False`` unless stop strings need the text. The
    ids are all the engine model sends back (the ensemble's postprocessing, or the Serve replica,
    decodes them), so text made by vLLM's output processor, token by token in the stub's process,
    would be thrown away (vllm 0.32 ``vllm/v1/engine/output_processor.py``; ``SamplingParams``
    refuses ``stop`` without ``detokenize``)."""
    out = dict(sampling)
    if interval:
        out["stream_interval"] = interval
    if not out.get("stop"):
        out["detokenize"] = False
    return out


def sampling_from_json(text: str | None) -> dict[str, Any]:
    """The standalone vLLM model's ``sampling_parameters`` JSON (official vLLM backend shape)."""
    if not text:
        return {}
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"sampling_parameters is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(params, dict):
        raise ValueError("sampling_parameters must be a JSON object, e.g. {\"max_tokens\": 32, \"temperature\": 0}")
    unknown = sorted(set(params) - SAMPLING_KEYS)
    if unknown:
        raise ValueError(f"unknown sampling_parameters {unknown}: use any of {sorted(SAMPLING_KEYS)}")
    for key in ("max_tokens", "top_k", "n", "min_tokens", "seed", "stream_interval"):
        if key in params:
            try:
                params[key] = int(params[key])
            except (TypeError, ValueError):
                raise ValueError(f"sampling_parameters.{key} must be an integer, got {params[key]!r}") from None
    if "max_tokens" in params and params["max_tokens"] <= 0:
        raise ValueError(f"sampling_parameters.max_tokens must be positive, got {params['max_tokens']}")
    return params


def instance_gpu_env(instance_kind: str | None, device_id: str | int | None, visible: str | None) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for an engine that starts processes of its own on a ``KIND_GPU`` instance.

    Triton tells a Python model instance its GPU (``model_instance_device_id``, counted among the GPUs
    the server sees) but does not restrict the stub to it; vLLM's engine processes use device 0 of
    what they see. So the instance narrows what its processes see to its own GPU: the ``device_id``-th
    entry of the server's ``visible`` list where one is set (Ray sets it for a replica), else the id
    itself. A ``KIND_CPU`` instance changes nothing."""
    if instance_kind != "GPU" or device_id is None:
        return {}
    index = int(device_id)
    entries = [e.strip() for e in visible.split(",") if e.strip()] if visible is not None else None
    if entries is None:
        return {"CUDA_VISIBLE_DEVICES": str(index)}
    if index >= len(entries):
        raise ValueError(f"instance on GPU {index}, but CUDA_VISIBLE_DEVICES={visible!r} shows {len(entries)} GPU(s)")
    return {"CUDA_VISIBLE_DEVICES": entries[index]}


class ChunkBuffer:
    """Streamed deltas joined into chunks of at least ``interval`` new tokens: vLLM's per-request
    ``stream_interval``, done by the backend for a vLLM whose ``SamplingParams`` lacks it (0.26). As in
    vLLM (``vllm/v1/engine/output_processor.py``, 0.32), the first token goes out at once, so the interval
    costs no time to first token. ``add`` returns ``(token_ids, text)`` when a chunk is due, else None;
    ``flush`` returns the rest."""

    def __init__(self, interval: int):
        self.interval = max(1, int(interval))
        self.ids: list[int] = []
        self.text = ""
        self.sent = False

    def add(self, token_ids: Sequence[int], text: str, finished: bool = False) -> tuple[list[int], str] | None:
        self.ids += list(token_ids)
        self.text += text
        due = finished or len(self.ids) >= self.interval or (not self.sent and self.ids)
        return self.flush() if due else None

    def flush(self) -> tuple[list[int], str] | None:
        if not (self.ids or self.text):
            return None
        chunk, self.ids, self.text = (self.ids, self.text), [], ""
        self.sent = True
        return chunk
