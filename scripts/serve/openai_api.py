"""The OpenAI-compatible request and response shapes of the Serve application (no Ray, no Triton).

:func:`parse_chat_request` and :func:`parse_completion_request` take the raw HTTP body and return
a validated request, or raise :class:`OpenAIError` with the status and the OpenAI error object
(``{"error": {"message", "type", "param", "code"}}``) that the official clients understand.
:func:`chat_prompt` renders messages with the tokenizer's chat template; :func:`response_body`
and :func:`chunk_body` make the JSON bodies and the Server-Sent Events chunks of chat and text
completions, and :func:`parse_sse` reads such a stream back.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Iterable, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationError)

from scripts.triton.backend.engine_stream import MAX_STREAM_INTERVAL

#: Most stop sequences a request may give (OpenAI's limit).
MAX_STOP_SEQUENCES = 4
#: The seeds a request may give: Triton's random_seed is a uint64, vLLM's OpenAI server takes an int64.
SEED_RANGE = (-(1 << 63), (1 << 64) - 1)


class OpenAIError(Exception):
    """A client error, rendered as OpenAI's error object with an HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: An integer as JSON has it: 8 or 8.0 (JSON Schema's "integer", which the OpenAPI schema declares),
#: not 8.5, "8" or true.
JsonInt = Annotated[StrictInt, BeforeValidator(_integral)]


class _Request(BaseModel):
    # Strict types; unknown fields are ignored, as OpenAI's servers do for fields they do not use.
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Request):
    """One part of a message's content given as a list (the ``openai`` client's typed messages,
    LangChain and ``vllm bench serve --backend openai-chat`` send it so). Only text parts are read."""

    type: StrictStr
    text: Optional[StrictStr] = None


class ChatMessage(_Request):
    role: Literal["system", "user", "assistant"]
    content: Union[StrictStr, list[ContentPart]]

    def text(self, index: int) -> str:
        """The message's text; its text parts joined by newlines. 400 for any other kind of part."""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for j, part in enumerate(self.content):
            if part.type != "text":
                raise OpenAIError(400, f"'messages[{index}].content[{j}]' is a {part.type!r} part: this model reads text "
                                  "only; send {\"type\": \"text\", \"text\": ...} parts", param=f"messages[{index}].content")
            if part.text is None:
                raise OpenAIError(400, f"'messages[{index}].content[{j}].text' is required", param=f"messages[{index}].content")
            texts.append(part.text)
        return "\n".join(texts)


class StreamOptions(_Request):
    include_usage: StrictBool = Field(False, description="end the stream with a chunk that holds the usage")


class _Sampling(_Request):
    model: Optional[StrictStr] = Field(None, description="the served model's name (GET /v1/models); any other is a 404")
    max_tokens: Optional[JsonInt] = Field(None, description="tokens to generate at most (at least 1); unset: the "
                                          "server's default, capped by the room the prompt leaves")
    max_completion_tokens: Optional[JsonInt] = Field(None, description="max_tokens under its newer name")
    temperature: StrictFloat = Field(1.0, ge=0, le=2)
    top_p: StrictFloat = Field(1.0, gt=0, le=1)
    stop: Union[StrictStr, list[StrictStr], None] = Field(None, description=f"up to {MAX_STOP_SEQUENCES} non-empty "
                                                          "strings; the text ends before the first one generated")
    stream: StrictBool = Field(False, description="answer with Server-Sent Events (text/event-stream)")
    stream_options: Optional[StreamOptions] = None
    seed: Optional[JsonInt] = Field(None, json_schema_extra={"minimum": SEED_RANGE[0], "maximum": SEED_RANGE[1]})
    ignore_eos: StrictBool = Field(False, description="vLLM's extension: generate max_tokens tokens, past the end of text")
    stream_interval: Optional[JsonInt] = Field(None, json_schema_extra={"minimum": 1, "maximum": MAX_STREAM_INTERVAL},
                                               description="vLLM's extension: new tokens per streamed chunk (the first "
                                               "and the last are sent at once); fewer chunks, less work per token "
                                               "in every layer they cross")
    presence_penalty: StrictFloat = Field(0.0, ge=-2, le=2)
    frequency_penalty: StrictFloat = Field(0.0, ge=-2, le=2)
    n: JsonInt = Field(1, description="choices per request: only 1")


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1, description="the conversation, ending with a user message")


class CompletionRequest(_Sampling):
    prompt: StrictStr = Field(description="the text to continue")


@dataclass
class Generation:
    """What one validated request asks the engine for."""

    kind: Literal["chat", "completion"]
    model: str
    prompt: str = ""
    max_tokens: Optional[int] = None
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    seed: Optional[int] = None
    ignore_eos: bool = False
    stream_interval: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    created: int = field(default_factory=lambda: int(time.time()))
    id: str = ""

    def __post_init__(self):
        if not self.id:
            prefix = "chatcmpl" if self.kind == "chat" else "cmpl"
            self.id = f"{prefix}-{uuid.uuid4().hex}"


def decode_body(body: bytes) -> Any:
    """The JSON value of a request body; 400 for a body that is not UTF-8, not JSON or not Unicode."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OpenAIError(400, f"the request body is not valid UTF-8 (byte {exc.start}): send JSON encoded as UTF-8") from None
    if not text.strip():
        raise OpenAIError(400, "the request body is empty: send a JSON object")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OpenAIError(400, f"the request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    try:  # a \ud800 escape without its pair decodes to a string that cannot be encoded (to Triton) again
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OpenAIError(400, f"the request body has a lone surrogate {exc.object[exc.start]!r} (a \\u escape of half a "
                          "UTF-16 pair): send valid Unicode text") from None
    return data


def _validation_error(exc: ValidationError) -> OpenAIError:
    """The first problem pydantic found, as a message naming the field and what it must be."""
    err = exc.errors()[0]
    field_path = err["loc"][: next((i for i, p in enumerate(err["loc"]) if p in _UNION_BRANCHES), len(err["loc"]))]
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in field_path).lstrip(".") or None
    if err["type"] == "missing":
        return OpenAIError(400, f"'{param}' is required", param=param)
    got = err.get("input")
    shown = json.dumps(got)[:80] if not isinstance(got, dict) else "an object"
    union = _UNION_MESSAGES.get(str(field_path[-1])) if field_path else None
    if union and len(field_path) < len(err["loc"]):  # the value matched no branch of the union
        return OpenAIError(400, f"'{param}' must be {union} (got {shown})", param=param)
    return OpenAIError(400, f"'{param}': {err['msg'].rstrip('.')} (got {shown})", param=param)


# pydantic names the branches of a union in an error's location; the messages name the field.
_UNION_BRANCHES = {"str", "list[str]", "list[ContentPart]"}
_UNION_MESSAGES = {"stop": "a string or a list of strings",
                   "content": 'a string or a list of content parts ({"type": "text", "text": ...})'}


def _parse(cls: type[_Sampling], body: bytes, served_model: str, kind: str) -> tuple[_Sampling, Generation]:
    data = decode_body(body)
    if not isinstance(data, dict):
        raise OpenAIError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    try:
        req = cls.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    if req.model is not None and req.model != served_model:
        raise OpenAIError(404, f"the model '{req.model}' does not exist: this server serves '{served_model}' (GET /v1/models)",
                          param="model", code="model_not_found")
    if req.n != 1:
        raise OpenAIError(400, f"'n' must be 1 (one choice per request), got {req.n}", param="n")
    if req.max_tokens is not None and req.max_completion_tokens is not None and req.max_tokens != req.max_completion_tokens:
        raise OpenAIError(400, "give 'max_tokens' or 'max_completion_tokens', not two different values", param="max_tokens")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is not None and max_tokens <= 0:
        raise OpenAIError(400, f"'max_tokens' must be at least 1, got {max_tokens}", param="max_tokens")
    if req.seed is not None and not SEED_RANGE[0] <= req.seed <= SEED_RANGE[1]:
        raise OpenAIError(400, f"'seed' must be an integer from {SEED_RANGE[0]} to {SEED_RANGE[1]}, got {req.seed}",
                          param="seed")
    if req.stream_interval is not None and not 1 <= req.stream_interval <= MAX_STREAM_INTERVAL:
        raise OpenAIError(400, f"'stream_interval' must be from 1 to {MAX_STREAM_INTERVAL} tokens, got {req.stream_interval}",
                          param="stream_interval")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > MAX_STOP_SEQUENCES or any(not s for s in stop):
        raise OpenAIError(400, f"'stop' takes up to {MAX_STOP_SEQUENCES} non-empty strings, got {stop!r}", param="stop")
    gen = Generation(kind=kind, model=served_model, max_tokens=max_tokens, temperature=float(req.temperature),
                     top_p=float(req.top_p), stop=stop, stream=req.stream,
                     include_usage=bool(req.stream_options and req.stream_options.include_usage),
                     seed=None if req.seed is None else req.seed % (1 << 64),  # a negative seed: its two's complement
                     ignore_eos=req.ignore_eos, stream_interval=req.stream_interval,
                     presence_penalty=float(req.presence_penalty), frequency_penalty=float(req.frequency_penalty))
    return req, gen


def parse_chat_request(body: bytes, served_model: str, tokenizer: Any) -> Generation:
    """A validated ``/v1/chat/completions`` request, its prompt rendered with the chat template."""
    req, gen = _parse(ChatCompletionRequest, body, served_model, "chat")
    messages = [{"role": m.role, "content": m.text(i)} for i, m in enumerate(req.messages)]
    for i, message in enumerate(messages):
        if not message["content"].strip():
            raise OpenAIError(400, f"'messages[{i}].content' is empty: every message needs some text", param=f"messages[{i}].content")
    if req.messages[-1].role == "assistant":
        raise OpenAIError(400, "the last message is the assistant's: end with a 'user' message", param="messages")
    gen.prompt = chat_prompt(tokenizer, messages)
    return gen


def parse_completion_request(body: bytes, served_model: str) -> Generation:
    """A validated ``/v1/completions`` request."""
    req, gen = _parse(CompletionRequest, body, served_model, "completion")
    if not req.prompt.strip():
        raise OpenAIError(400, "'prompt' is empty: send some text", param="prompt")
    gen.prompt = req.prompt
    return gen


def adds_bos(tokenizer: Any) -> bool:
    """Whether tokenizing text puts the BOS token in front (Llama tokenizers do)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


def chat_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The prompt text for ``messages``: the tokenizer's chat template with the assistant's turn opened.

    Llama chat templates start with the BOS token, and Triton's preprocessing model tokenizes
    with ``add_special_tokens`` (so plain prompts get their BOS). Sending the rendered template
    as it is would start the prompt with two BOS tokens and change the answer: the template's
    one is dropped here when the tokenizer adds its own.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise OpenAIError(400, "this model has no chat template: use /v1/completions with a plain prompt")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    bos = getattr(tokenizer, "bos_token", None)
    if bos and text.startswith(bos) and adds_bos(tokenizer):
        text = text[len(bos):]
    return text


def resolve_max_tokens(gen: Generation, prompt_tokens: int, max_model_len: int, default_max_tokens: int) -> int:
    """``max_tokens`` checked against the model's length; unset: the default, capped by what is left."""
    room = max_model_len - prompt_tokens
    if room <= 0:
        raise OpenAIError(400, f"the prompt has {prompt_tokens} tokens, the model's limit is {max_model_len}: shorten it",
                          param="messages" if gen.kind == "chat" else "prompt", code="context_length_exceeded")
    if gen.max_tokens is None:
        return min(default_max_tokens, room)
    if gen.max_tokens > max_model_len:
        raise OpenAIError(400, f"'max_tokens' is {gen.max_tokens}, more than the model's limit of {max_model_len} tokens",
                          param="max_tokens")
    if gen.max_tokens > room:
        raise OpenAIError(400, f"the prompt has {prompt_tokens} tokens and 'max_tokens' is {gen.max_tokens}: together more "
                          f"than the model's limit of {max_model_len}; lower max_tokens to at most {room}",
                          param="max_tokens", code="context_length_exceeded")
    return gen.max_tokens


def finish_reason(completion_tokens: int, max_tokens: int) -> str:
    return "length" if completion_tokens >= max_tokens else "stop"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def response_body(gen: Generation, text: str, reason: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The whole (non-streaming) response of a chat or text completion."""
    if gen.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    return {"id": gen.id, "object": obj, "created": gen.created, "model": gen.model, "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens)}


def chunk_body(gen: Generation, *, text: str | None = None, reason: str | None = None, role: bool = False,
               usage_counts: dict[str, int] | None = None) -> dict[str, Any]:
    """One streamed chunk: a role opener, a text delta, the finish reason, or (no choices) the usage."""
    if usage_counts is not None:
        choices = []
    elif gen.kind == "chat":
        delta: dict[str, str] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]
    else:
        choices = [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}]
    body = {"id": gen.id, "object": "chat.completion.chunk" if gen.kind == "chat" else "text_completion",
            "created": gen.created, "model": gen.model, "choices": choices}
    if gen.include_usage:
        body["usage"] = usage_counts
    return body


def sse(data: dict[str, Any] | str) -> str:
    """One Server-Sent Event line pair (``data: ...`` and a blank line)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


SSE_DONE = sse("[DONE]")


def models_body(served_model: str, created: int, owned_by: str = "triton") -> dict[str, Any]:
    return {"object": "list", "data": [{"id": served_model, "object": "model", "created": created, "owned_by": owned_by}]}


def parse_sse(lines: Iterable[str]) -> list[dict[str, Any] | str]:
    """The payloads of an SSE stream (``[DONE]`` as the string), for clients and tests."""
    out: list[dict[str, Any] | str] = []
    for line in lines:
        if line.startswith("data:"):
            payload = line[5:].strip()
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
