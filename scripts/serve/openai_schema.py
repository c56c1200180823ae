"""The OpenAPI description of the Serve application's routes (``/openapi.json``, ``/docs``).

The response bodies as pydantic models (the routes' ``response_model`` and ``responses``), the
error statuses each route declares, and :func:`complete_openapi`, which adds what FastAPI cannot
see by itself: the request bodies. The POST routes read their raw body (the 413 and 415 checks,
and OpenAI's 400 error object rather than FastAPI's 422), so their bodies are declared with
``openapi_extra`` (:func:`json_request`) and the request models of :mod:`scripts.serve.openai_api`
are put into the schema's components here. tests/unit/serve/test_openapi.py fuzzes the routes
against this description.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from scripts.serve.openai_api import ChatCompletionRequest, CompletionRequest

REF = "#/components/schemas/{model}"
#: The models of the request bodies, put into the schema's components by :func:`complete_openapi`.
REQUEST_MODELS = (ChatCompletionRequest, CompletionRequest)
#: The optional bearer token (scripts.serve.app.require_api_key): asked for only when the replicas have a key.
BEARER = "bearer"

FinishReason = Literal["stop", "length"]


class ErrorDetail(BaseModel):
    message: str = Field(description="what went wrong and what to change")
    type: str = Field(description="invalid_request_error for a 4xx, server_error for a 500 or 503")
    param: Optional[str] = Field(description="the request field at fault, if one is")
    code: Optional[str] = Field(description="invalid_api_key, model_not_found, context_length_exceeded, triton_unavailable or null")


class ErrorResponse(BaseModel):
    """OpenAI's error object, which the official clients read."""

    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    """The whole answer of ``POST /v1/chat/completions``."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: FinishReason


class TextCompletion(BaseModel):
    """The whole answer of ``POST /v1/completions``."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ChunkDelta(BaseModel):
    role: Optional[Literal["assistant"]] = Field(None, description="in the first chunk only")
    content: Optional[str] = Field(None, description="the next piece of text")


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    logprobs: None
    finish_reason: Optional[FinishReason] = Field(description="set in the last chunk with choices")


_CHUNK_USAGE = "present with stream_options.include_usage: null, except in the last chunk, which has no choices"


class ChatCompletionChunk(BaseModel):
    """One event of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Optional[Usage] = Field(None, description=_CHUNK_USAGE)


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: Optional[FinishReason] = Field(description="set in the last chunk with choices")


class TextCompletionChunk(BaseModel):
    """One event of a streamed text completion."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Optional[Usage] = Field(None, description=_CHUNK_USAGE)


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    """``GET /v1/models``: the one model this server serves."""

    object: Literal["list"]
    data: list[ModelCard]


class GenerateResponse(BaseModel):
    """``GET /generate``: greedy text for a prompt."""

    text: str
    usage: Usage


class HealthResponse(BaseModel):
    status: Literal["ok", "loading"] = Field(description="ok while Triton's model is ready, else loading")


#: The models of the streamed events, put into the components by :func:`complete_openapi`: FastAPI
#: does not see them (the routes return a StreamingResponse).
EVENT_MODELS = (ChatCompletionChunk, TextCompletionChunk)

ERROR_DESCRIPTIONS = {
    400: "The request is invalid: the message names the field and what it must be (the body is not JSON, a field "
         "has the wrong type, the prompt and max_tokens exceed the model's length: code context_length_exceeded).",
    401: "Missing or wrong API key (code invalid_api_key): the replicas were given one in $TUTORIAL_API_KEY; send "
         "'Authorization: Bearer <key>'.",
    404: "The request names a model this server does not serve (code model_not_found): see GET /v1/models.",
    413: "The request body is larger than the server's limit.",
    415: "The body was not sent as 'Content-Type: application/json'.",
    500: "Triton failed the request (type server_error).",
    503: "No Triton answers: it crashed or is restarting (type server_error, code triton_unavailable); retry shortly.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` for these error statuses: OpenAI's error object, and what each means."""
    return {status: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[status]} for status in statuses}


def streamed(chunk: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """The ``text/event-stream`` answer of a route with ``stream: true``, beside its JSON one. Its
    schema describes one event, as tools read a stream's schema before OpenAPI 3.2's ``itemSchema``."""
    data = {"anyOf": [{"const": "[DONE]", "description": "the last event"},
                      {"type": "string", "contentMediaType": "application/json",
                       "contentSchema": {"anyOf": [{"$ref": REF.format(model=chunk.__name__)},
                                                   {"$ref": REF.format(model=ErrorResponse.__name__)}]}}]}
    event = {"type": "object", "properties": {"data": data}, "required": ["data"],
             "description": f"One Server-Sent Event: `data: <{chunk.__name__}>`, or an ErrorResponse if Triton fails "
                            "mid-stream; the stream ends with `data: [DONE]`."}
    return {200: {"description": "The completion: one JSON body, or with stream: true Server-Sent Events.",
                  "content": {"text/event-stream": {"schema": event}}}}


def json_request(model: type[BaseModel], text: dict[str, Any]) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring a JSON body of ``model`` that the route parses itself,
    with examples (``text``: the request's text field) for /docs' "Try it out" and for fuzzers."""
    streamed = {"max_tokens": 16, "stream": True, "stream_options": {"include_usage": True}}
    examples = {"whole": {"summary": "One JSON answer", "value": text | {"max_tokens": 16}},
                "streamed": {"summary": "Server-Sent Events, with the usage at the end", "value": text | streamed}}
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": REF.format(model=model.__name__)}, "examples": examples}}}}


GUARDED: dict[str, Any] = {"security": [{BEARER: []}, {}]}  # the key, or none where the replicas have none


def complete_openapi(schema: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's schema of the app, completed in place: the request and event models (and those they
    use) in the components; no 422, which FastAPI declares for query parameters but the app answers as a 400;
    the bearer token's scheme."""
    components = schema.setdefault("components", {})
    models = components.setdefault("schemas", {})
    for model, mode in [(m, "validation") for m in REQUEST_MODELS] + [(m, "serialization") for m in EVENT_MODELS]:
        body = model.model_json_schema(ref_template=REF, mode=mode)
        for name, definition in [*body.pop("$defs", {}).items(), (model.__name__, body)]:
            if models.setdefault(name, definition) != definition:
                raise ValueError(f"two different models are named {name} in the OpenAPI schema")
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    for unused in ("HTTPValidationError", "ValidationError"):
        models.pop(unused, None)
    components["securitySchemes"] = {BEARER: {
        "type": "http", "scheme": "bearer",
        "description": "Needed only when the replicas were given a key in $TUTORIAL_API_KEY."}}
    return schema
