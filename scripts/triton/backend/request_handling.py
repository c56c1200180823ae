"""Request handling shared by the Triton Python models (preprocessing, postprocessing, engine, BLS).

Pure functions over NumPy arrays, so they are unit-tested without a server; each model's
``model.py`` only moves tensors between Triton and these functions. ``ValueError`` here means bad
client input: the models turn it into an INVALID_ARG error (HTTP 400) and keep serving.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from scripts.model.tokenizer import decode_ids


def log_initialized(model_name: str, who: str = "python model") -> None:
    """The line every Python model of this repository writes at the end of its ``initialize()``,
    straight into the server's log (its stderr, no IPC): ``<who>: initialize() of 'NAME' returned at
    T``. Triton logs ``successfully loaded 'NAME'`` once the stub's answer reaches it; a load whose
    answer never comes (Triton 2.51's Python backend on a CPU-starved machine) is told by this line
    and the missing one (``scripts.triton.crashes.stalled_loads``), and the server started again."""
    print(f"{who}: initialize() of '{model_name}' returned at {time.time():.3f}", file=sys.stderr, flush=True)


def model_parameter(model_config: dict, key: str, default: str | None = None) -> str:
    """A ``parameters { key: ... }`` string value of a model config (as Triton passes it as JSON)."""
    value = model_config.get("parameters", {}).get(key, {}).get("string_value")
    if value is None or value.startswith("${"):
        if default is None:
            raise ValueError(f"model {model_config.get('name')!r} lacks parameter {key!r}: fill the template (notebook 02)")
        return default
    return value


def is_true(value: str | bool | None) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def decode_texts(array: np.ndarray, name: str) -> list[str]:
    """A [B, 1] (or [B]) BYTES tensor as B strings; undecodable bytes are the client's error."""
    texts = []
    for item in np.asarray(array).reshape(len(array), -1)[:, 0]:
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{name} is not valid UTF-8 text") from None
        texts.append(str(item))
    return texts


def word_lists(array: np.ndarray | None, batch: int, name: str) -> list[list[str]]:
    """``bad_words``/``stop_words``: [B, N] strings, one word (or phrase) each; empty ones skipped."""
    if array is None:
        return [[] for _ in range(batch)]
    rows = np.asarray(array).reshape(batch, -1)
    out = []
    for row in rows:
        words = []
        for w in row:
            w = w.decode("utf-8", errors="strict") if isinstance(w, bytes) else str(w)
            if w:
                words.append(w)
        out.append(words)
    return out


def to_word_list_format(id_lists: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
    """TensorRT-LLM's [B, 2, L] words tensor: row 0 the flattened ids, row 1 the end offsets (-1 padded)."""
    flat, offsets = [], []
    for words in id_lists:
        ids, ends, total = [], [], 0
        for w in words:
            ids.extend(w)
            total += len(w)
            ends.append(total)
        flat.append(ids)
        offsets.append(ends)
    width = max(1, *(len(f) for f in flat), *(len(o) for o in offsets)) if flat else 1
    out = np.zeros((len(id_lists), 2, width), dtype=np.int32)
    out[:, 1, :] = -1
    for i, (ids, ends) in enumerate(zip(flat, offsets)):
        out[i, 0, : len(ids)] = ids
        out[i, 1, : len(ends)] = ends
    return out


def from_word_list_format(words: np.ndarray) -> list[list[int]]:
    """The inverse for one request: [2, L] -> list of token-id lists."""
    words = np.asarray(words).reshape(2, -1)
    ids, ends = words[0], [int(e) for e in words[1] if e >= 0]
    out, start = [], 0
    for end in ends:
        out.append([int(t) for t in ids[start:end]])
        start = end
    return out


def check_prompt_text(text: str) -> None:
    if not text.strip():
        raise ValueError("text_input is empty: send a prompt with at least one non-space character")


def longest_token_bytes(tokenizer: Any) -> int:
    """An upper bound on the UTF-8 bytes one token of ``tokenizer`` stands for: the longest token's
    own spelling (a byte-level BPE token spells each byte as one character, a SentencePiece token
    spells a space as the 3-byte ``▁`` and a byte as ``<0xNN>``: never shorter than what it stands for)."""
    return max((len(t.encode("utf-8")) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))) if t), default=1)


def check_prompt_bytes(text: str, longest: int, max_model_len: int) -> None:
    """Refuse, without tokenizing it, a prompt too long for the model whatever its tokens: one of B
    bytes has at least B / ``longest`` tokens (halved once more for normalisers that shorten text).
    Tokenizing 10 MB takes half a minute on one core, and the model instance that does it serves
    nothing else meanwhile."""
    size = len(text.encode("utf-8"))
    if max_model_len and size > 2 * longest * max_model_len:
        raise ValueError(f"the prompt is {size} bytes, more than any prompt of at most {max_model_len} tokens (the "
                         "model's limit) can be; shorten the prompt")


def check_prompt_tokens(prompt_tokens: int, max_input_len: int) -> None:
    """The prompt within a TensorRT-LLM engine's ``max_input_len`` (0: none; see :func:`check_request_size`)."""
    if max_input_len and prompt_tokens > max_input_len:
        raise ValueError(f"the prompt has {prompt_tokens} tokens, more than the engine's max_input_len of "
                         f"{max_input_len} tokens (the longest prompt it was built for); shorten the prompt")


def check_request_size(prompt_tokens: int, max_tokens: int | None, max_model_len: int, max_input_len: int = 0) -> None:
    """``max_tokens`` positive, the prompt within the engine's ``max_input_len`` and prompt plus output
    within the model's length (``max_model_len``; a TensorRT-LLM engine's ``max_seq_len``). 0: no limit.

    TensorRT-LLM checks both itself, but not as a client error. Whatever the executor refuses reaches
    the client as TRITONSERVER_ERROR_INTERNAL (HTTP 500), whether it throws at enqueue or answers with
    an error response (triton-inference-server/tensorrtllm_backend@v0.17.0:
    inflight_batcher_llm/src/model_instance_state.cc, ``enqueue`` and ``fillTritonResponse``). The
    executor throws "Prompt length (N) exceeds maximum input length (M)" and silently lowers the output
    length when prompt plus output exceed ``max_seq_len`` (NVIDIA/TensorRT-LLM
    cpp/tensorrt_llm/batch_manager/llmRequest.cpp, ``LlmRequest::validate``, read at a commit later
    than v0.17.0: TensorRT-LLM's tree is too large to mirror here, so not checked at v0.17.0).
    Checked here first, both become INVALID_ARG (HTTP 400) with a message that says what to change.
    """
    if max_tokens is None or max_tokens <= 0:
        raise ValueError(f"max_tokens must be a positive number of tokens, got {max_tokens}")
    check_prompt_tokens(prompt_tokens, max_input_len)
    if max_model_len and prompt_tokens + max_tokens > max_model_len:
        raise ValueError(f"the prompt has {prompt_tokens} tokens and max_tokens is {max_tokens}: together more than the "
                         f"model's limit of {max_model_len} tokens; shorten the prompt or lower max_tokens")


@dataclass
class Preprocessor:
    """Tokenizes a batch of prompts into the engine's tensors (TensorRT-LLM's preprocessing contract)."""

    tokenizer: Any
    add_special_tokens: bool = True
    max_model_len: int = 0  # prompt + output; 0: no limit
    max_input_len: int = 0  # prompt alone (a TensorRT-LLM engine's build limit); 0: no limit

    def __post_init__(self):
        self.longest = longest_token_bytes(self.tokenizer)

    def __call__(self, query: np.ndarray, output_len: np.ndarray, bad_words: np.ndarray | None = None,
                 stop_words: np.ndarray | None = None, end_id: np.ndarray | None = None,
                 pad_id: np.ndarray | None = None) -> dict[str, np.ndarray]:
        texts = decode_texts(query, "text_input")
        batch = len(texts)
        lengths = np.asarray(output_len).reshape(batch, -1)[:, 0].astype(np.int64)
        ids = []
        for i, text in enumerate(texts):
            check_prompt_text(text)
            check_prompt_bytes(text, self.longest, self.max_input_len or self.max_model_len)
            tokens = self.tokenizer(text, add_special_tokens=self.add_special_tokens)["input_ids"]
            check_request_size(len(tokens), int(lengths[i]), self.max_model_len, self.max_input_len)
            ids.append(tokens)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        end_ids = np.asarray(end_id).reshape(batch, -1)[:, :1].astype(np.int32) if end_id is not None else np.full((batch, 1), eos, np.int32)
        pad_ids = np.asarray(pad_id).reshape(batch, -1)[:, :1].astype(np.int32) if pad_id is not None else np.full((batch, 1), pad, np.int32)
        width = max(len(t) for t in ids)
        input_ids = np.full((batch, width), pad, dtype=np.int32)
        for i, t in enumerate(ids):
            input_ids[i, : len(t)] = t

        def encode(words):
            return [[self.tokenizer(w, add_special_tokens=False)["input_ids"] for w in ws] for ws in words]

        return {
            "INPUT_ID": input_ids,
            "REQUEST_INPUT_LEN": np.array([[len(t)] for t in ids], dtype=np.int32),
            "BAD_WORDS_IDS": to_word_list_format(encode(word_lists(bad_words, batch, "bad_words"))),
            "STOP_WORDS_IDS": to_word_list_format(encode(word_lists(stop_words, batch, "stop_words"))),
            "REQUEST_OUTPUT_LEN": lengths.reshape(batch, 1).astype(np.int32),
            "OUT_END_ID": end_ids,
            "OUT_PAD_ID": pad_ids,
        }


def postprocess(tokenizer: Any, tokens: np.ndarray, lengths: np.ndarray, skip_special_tokens: bool = True) -> np.ndarray:
    """[B, beam, T] token ids and [B, beam] lengths -> [B, beam] UTF-8 texts (beam 0 used by clients), each
    decoded as every comparison decodes them (:func:`scripts.model.tokenizer.decode_ids`)."""
    tokens = np.asarray(tokens)
    if tokens.ndim == 2:
        tokens = tokens[:, None, :]
    lengths = np.asarray(lengths).reshape(tokens.shape[0], tokens.shape[1])
    out = np.empty(lengths.shape, dtype=object)
    for b in range(tokens.shape[0]):
        for k in range(tokens.shape[1]):
            ids = tokens[b, k, : int(lengths[b, k])].tolist()
            out[b, k] = decode_ids(tokenizer, ids, skip_special_tokens).encode("utf-8")
    return out


#: What an engine model answers with (TensorRT-LLM's names, which this repository's other engine
#: models use too): the BLS model and direct engine clients (scripts.triton.engine_request) ask for them.
#: TensorRT-LLM's backend fails a request that does not ask for both (tensorrtllm_backend@v0.17.0:
#: inflight_batcher_llm/src/model_instance_state.cc, fillTritonResponse).
ENGINE_OUTPUTS = ("output_ids", "sequence_length")


def gather_engine_outputs(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One engine answer from the responses of a decoupled engine: ``(output_ids, sequence_length)``.

    Each part is one response's ``output_ids`` [1, beams, T] and ``sequence_length`` [1, beams]; the
    tokens of beam ``b`` are ``output_ids[0, b, :sequence_length[0, b]]`` and the rest is padding
    (-1 in TensorRT-LLM's answers: tensorrtllm_backend@v0.17.0:inflight_batcher_llm/src/
    model_instance_state.cc, ``fillTritonResponse``). A streamed answer's responses each hold the
    tokens that are new since the previous one, so the whole answer is their concatenation per beam.
    """
    if not parts:
        raise ValueError("the engine sent no tokens")
    beams: list[list[int]] | None = None
    for output_ids, sequence_length in parts:
        ids = np.asarray(output_ids)
        ids = ids.reshape(1, -1, ids.shape[-1]) if ids.ndim != 3 else ids
        lengths = np.asarray(sequence_length).reshape(-1)
        if beams is None:
            beams = [[] for _ in range(ids.shape[1])]
        for b, beam in enumerate(beams):
            beam.extend(int(t) for t in ids[0, b, : int(lengths[b])])
    width = max(1, *(len(beam) for beam in beams))
    merged = np.full((1, len(beams), width), -1, dtype=np.int32)
    for b, beam in enumerate(beams):
        merged[0, b, : len(beam)] = beam
    return merged, np.array([[len(beam) for beam in beams]], dtype=np.int32)


# -- engine requests (token ids in, token ids out) ---------------------------------------------

@dataclass
class EngineRequest:
    prompt_ids: list[int]
    max_tokens: int
    sampling: dict[str, Any]
    streaming: bool


def scalar(array: np.ndarray | None, cast, default=None):
    if array is None:
        return default
    flat = np.asarray(array).reshape(-1)
    if flat.size == 0:
        return default
    return cast(flat[0].item())


def engine_request(inputs: dict[str, np.ndarray], tokenizer: Any, max_model_len: int) -> EngineRequest:
    """Translate one request's TensorRT-LLM engine tensors into vLLM sampling settings."""
    ids = np.asarray(inputs["input_ids"])
    if ids.ndim == 2 and ids.shape[0] != 1:
        raise ValueError(f"one sequence per request, got a batch of {ids.shape[0]}: send separate requests "
                         "(Triton batches them, the engine batches them continuously)")
    ids = ids.reshape(-1)
    length = scalar(inputs.get("input_lengths"), int, len(ids))
    if not 0 < length <= len(ids):
        raise ValueError(f"input_lengths {length} does not match input_ids of length {len(ids)}")
    prompt = [int(t) for t in ids[:length]]
    max_tokens = scalar(inputs.get("request_output_len"), int)
    check_request_size(len(prompt), max_tokens, max_model_len)
    sampling: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
    end_id = scalar(inputs.get("end_id"), int)
    if end_id is not None:
        if end_id < 0:
            sampling["ignore_eos"] = True
        elif end_id != tokenizer.eos_token_id:
            sampling["stop_token_ids"] = [end_id]
    if inputs.get("stop_words_list") is not None:
        words = [tokenizer.decode(w) for w in from_word_list_format(inputs["stop_words_list"]) if w]
        if words:
            sampling["stop"] = words
    if inputs.get("bad_words_list") is not None:
        # vLLM 0.32 on the CPU ignores SamplingParams.bad_words (measured), so bad words become a
        # logit bias that rules their token out. That expresses one-token words only: longer ones
        # are refused rather than silently ignored.
        bias = {}
        for w in from_word_list_format(inputs["bad_words_list"]):
            if len(w) > 1:
                raise ValueError(f"bad word {tokenizer.decode(w)!r} is {len(w)} tokens; the cpu engine bans one-token "
                                 "words only (a word inside a sentence usually needs its leading space to be one token)")
            if w:
                bias[w[0]] = -100.0
        if bias:
            sampling["logit_bias"] = bias
    top_k = scalar(inputs.get("runtime_top_k"), int, 0)
    top_p = scalar(inputs.get("runtime_top_p"), float, 0.0)
    temperature = scalar(inputs.get("temperature"), float)
    if top_p < 0 or top_p > 1:
        raise ValueError(f"top_p must be within [0, 1], got {top_p}")
    if temperature is not None and temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k > 1 or 0 < top_p < 1:  # sampling asked for; otherwise greedy, as TensorRT-LLM by default
        sampling["temperature"] = 1.0 if temperature is None else temperature
        if top_k > 1:
            sampling["top_k"] = top_k
        if 0 < top_p < 1:
            sampling["top_p"] = top_p
    for name in ("repetition_penalty", "presence_penalty", "frequency_penalty"):
        value = scalar(inputs.get(name), float)
        if value is not None:
            sampling[name] = value
    seed = scalar(inputs.get("random_seed"), int)
    if seed is not None:
        sampling["seed"] = seed
    return EngineRequest(prompt, max_tokens, sampling, bool(scalar(inputs.get("streaming"), bool, False)))
