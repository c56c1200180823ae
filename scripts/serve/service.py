"""What the Serve application does with a request, over a Triton that is already running.

Why it is built this way, and the sources: docs/design/serve.md.
"""
from __future__ import annotations

import os
import time
from typing import Any, AsyncIterator, Union

from scripts.serve.openai_api import (SSE_DONE, Generation, OpenAIError, chunk_body, finish_reason, models_body,
                                      parse_chat_request, parse_completion_request, resolve_max_tokens, response_body,
                                      sse, usage)
from scripts.serve.streaming import IncrementalDetokenizer, StopTrimmer
from scripts.triton.backend.request_handling import check_prompt_bytes, check_prompt_tokens, longest_token_bytes
from scripts.triton.client import Chunk, TritonLLM, TritonRequestError, TritonUnavailable
from scripts.triton.engine_request import EngineInputs
from scripts.triton.repository.fill import RepositoryFacts
from scripts.triton.sampling import EnsembleRequest, engine_inputs, ensemble_inputs

#: A route's answer: a whole JSON body, or the Server-Sent Events of a streamed one.
Reply = Union[dict[str, Any], AsyncIterator[str]]


def max_body_bytes(max_model_len: int) -> int:
    """The largest request body worth reading: 1 MiB, or 64 bytes per token of context where that is
    more (a token is a few characters; JSON escapes a character in at most 12 bytes)."""
    return max(1 << 20, 64 * int(max_model_len))


def request_parameters(gen: Generation) -> dict[str, Any] | None:
    """Triton request parameters (beside the input tensors) for what no tensor of TensorRT-LLM's
    contract carries: ``stream_interval``, which this repository's vLLM engine models read
    (scripts/triton/backend/vllm_backend.py) and other backends ignore."""
    return {"stream_interval": gen.stream_interval} if gen.stream_interval and gen.stream_interval > 1 else None


def triton_failed(exc: TritonRequestError) -> OpenAIError:
    """What a client sees when Triton refuses or fails a request the app had accepted: 503 when no
    Triton answers (a client may retry: Serve restarts the replica that owns it), else 500."""
    if isinstance(exc, TritonUnavailable):
        return OpenAIError(503, f"Triton is unavailable, retry shortly: {exc}", type="server_error",
                           code="triton_unavailable")
    return OpenAIError(500, f"Triton could not serve the request: {exc}", type="server_error")


class LLMService:
    """The OpenAI routes' logic over one Triton ensemble."""

    def __init__(self, backend: TritonLLM, facts: RepositoryFacts, tokenizer: Any, served_model_name: str,
                 default_max_tokens: int = 64, api_key: str | None = None, engine: EngineInputs | None = None):
        self.backend, self.facts, self.tokenizer = backend, facts, tokenizer
        if engine is not None and not engine.decoupled:
            raise ValueError(f"{engine.model_name} is not decoupled: the Serve application streams from the engine "
                             "model; fill the repository with decoupled_mode true (fill_serve_repository does)")
        self.engine = engine  # None: requests go to the ensemble
        self.api_key = api_key  # None: no bearer token is asked for (scripts.serve.app.require_api_key)
        self.max_body_bytes = max_body_bytes(facts.max_model_len)
        self.vocab_size = len(tokenizer)
        self.longest_token = longest_token_bytes(tokenizer)
        self.served_model_name, self.default_max_tokens = served_model_name, int(default_max_tokens)
        self.created = int(time.time())
        self.closed = False

    # -- the routes ---------------------------------------------------------------------------
    async def generate(self, query: str, max_tokens: int) -> dict[str, Any]:
        """``GET /generate``: greedy text for a prompt, and its usage."""
        if not query.strip():
            raise OpenAIError(400, "'query' is empty: send some text", param="query")
        if max_tokens <= 0:
            raise OpenAIError(400, f"'max_tokens' must be at least 1, got {max_tokens}", param="max_tokens")
        body = await self.complete(Generation("completion", self.served_model_name, query, max_tokens))
        return {"text": body["choices"][0]["text"], "usage": body["usage"]}

    async def chat_completions(self, body: bytes) -> Reply:
        """``POST /v1/chat/completions`` from its raw body."""
        return await self.respond(parse_chat_request(body, self.served_model_name, self.tokenizer))

    async def completions(self, body: bytes) -> Reply:
        """``POST /v1/completions`` from its raw body."""
        return await self.respond(parse_completion_request(body, self.served_model_name))

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``: the one model this server serves."""
        return models_body(self.served_model_name, self.created)

    async def health(self) -> tuple[int, dict[str, str]]:
        """``GET /health``: 200 while Triton's model is ready, else 503 (still loading, or gone)."""
        ready = await self.backend.ready()
        return (200, {"status": "ok"}) if ready else (503, {"status": "loading"})

    async def check_ready(self) -> None:
        """Raise unless Triton's model is ready (Serve replaces a replica whose health check raises)."""
        if not await self.backend.ready():
            raise RuntimeError(f"Triton model {self.backend.info()['model']!r} is not ready")

    def triton_info(self, replica: str) -> dict[str, Any]:
        """The backend's Triton (mode, URLs, PID), the replica's id and process, whether it streams, and the
        GPUs Ray gave the replica (``CUDA_VISIBLE_DEVICES``, None where Ray set none)."""
        return self.backend.info() | {"replica": replica, "replica_pid": os.getpid(), "decoupled": self.facts.decoupled,
                                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def close(self) -> None:
        """Stop the backend's Triton (once, however often this is called)."""
        if not self.closed:
            self.closed = True
            self.backend.stop()

    # -- one generation -----------------------------------------------------------------------
    async def respond(self, gen: Generation) -> Reply:
        return await (self.stream(gen) if gen.stream else self.complete(gen))

    async def complete(self, gen: Generation) -> dict[str, Any]:
        """The whole response body of a chat or text completion."""
        inputs, prompt_tokens, max_tokens = self._prepare(gen)
        trimmer, text, tokens = StopTrimmer(gen.stop), [], 0
        # The ensemble answers a request that does not stream with its whole text; the engine model
        # streams token ids, decoded here.
        detokenizer = IncrementalDetokenizer(self.tokenizer, self.facts.skip_special_tokens) if self.engine else None
        try:
            async for chunk in self.backend.generate(inputs, request_parameters(gen)):
                text.append(trimmer.feed(chunk.text if detokenizer is None else detokenizer.feed(chunk.ids or [])))
                tokens += chunk.tokens
        except TritonRequestError as exc:
            raise triton_failed(exc) from None
        if detokenizer is not None:
            text.append(trimmer.feed(detokenizer.finish()))
        text.append(trimmer.finish())
        reason = "stop" if trimmer.stopped else finish_reason(tokens, max_tokens)
        return response_body(gen, "".join(text), reason, prompt_tokens, tokens)

    async def stream(self, gen: Generation) -> AsyncIterator[str]:
        """The response as Server-Sent Events, ending in ``data: [DONE]``.

        Triton's first response is awaited here, before the caller sends its 200: a request
        Triton refuses still gets an error status (later failures become an error event).
        """
        inputs, prompt_tokens, max_tokens = self._prepare(gen)
        chunks = self.backend.generate(inputs, request_parameters(gen))
        try:
            first = await anext(chunks, None)
        except TritonRequestError as exc:
            raise triton_failed(exc) from None
        return self._events(gen, first, chunks, prompt_tokens, max_tokens)

    def _prepare(self, gen: Generation) -> tuple[dict, int, int]:
        param = "messages" if gen.kind == "chat" else "prompt"
        try:  # before tokenizing: a huge prompt would hold this replica's event loop for seconds
            check_prompt_bytes(gen.prompt, self.longest_token, self.facts.max_input_len or self.facts.max_model_len)
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param=param, code="context_length_exceeded") from None
        prompt_ids = self.tokenizer(gen.prompt)["input_ids"]  # as the preprocessing model tokenizes it
        prompt_tokens = len(prompt_ids)
        try:  # a TensorRT-LLM engine's max_input_len: its executor would throw, and Triton answer 500
            check_prompt_tokens(prompt_tokens, self.facts.max_input_len)
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param=param, code="context_length_exceeded") from None
        max_tokens = resolve_max_tokens(gen, prompt_tokens, self.facts.max_model_len, self.default_max_tokens)
        request = EnsembleRequest(gen.prompt, max_tokens, stream=gen.stream and self.facts.decoupled,
                                  temperature=gen.temperature, top_p=gen.top_p, stop=gen.stop, seed=gen.seed,
                                  ignore_eos=gen.ignore_eos,
                                  presence_penalty=gen.presence_penalty, frequency_penalty=gen.frequency_penalty)
        if self.engine is not None:  # the engine model's tensors, always streamed
            return (engine_inputs(self.engine, request, prompt_ids, self.tokenizer, self.vocab_size), prompt_tokens,
                    max_tokens)
        return ensemble_inputs(request, self.vocab_size), prompt_tokens, max_tokens

    async def _events(self, gen: Generation, first: Chunk | None, chunks: AsyncIterator[Chunk], prompt_tokens: int,
                      max_tokens: int) -> AsyncIterator[str]:
        if gen.kind == "chat":
            yield sse(chunk_body(gen, text="", role=True))
        trimmer, tokens = StopTrimmer(gen.stop), 0
        # Each response's text_output is decoded alone, which breaks a character whose bytes span
        # two responses; the ids are decoded incrementally instead.
        detokenizer = IncrementalDetokenizer(self.tokenizer, self.facts.skip_special_tokens)
        try:
            chunk = first
            while chunk is not None:
                tokens += chunk.tokens
                text = trimmer.feed(chunk.text if chunk.ids is None else detokenizer.feed(chunk.ids))
                if text:
                    yield sse(chunk_body(gen, text=text))
                chunk = await anext(chunks, None)
        except TritonRequestError as exc:
            yield sse(triton_failed(exc).body())
            yield SSE_DONE
            return
        rest = trimmer.feed(detokenizer.finish())
        rest += trimmer.finish()
        if rest:
            yield sse(chunk_body(gen, text=rest))
        yield sse(chunk_body(gen, reason="stop" if trimmer.stopped else finish_reason(tokens, max_tokens)))
        if gen.include_usage:
            yield sse(chunk_body(gen, usage_counts=usage(prompt_tokens, tokens)))
        yield SSE_DONE
