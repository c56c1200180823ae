"""Chat requests to a Serve application's OpenAI routes.

:class:`ChatClient` sends greedy ``/v1/chat/completions`` requests over one asyncio connection pool
(the benchmarks and the loads of :mod:`scripts.clients.load`); :func:`chat_text`, :func:`post_raw`
and :func:`sse_events` are the plain blocking calls notebook 05 shows, one request at a time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import httpx
import requests

from scripts.model.tiny_llama import chat_examples
from scripts.serve.openai_api import parse_sse


def bench_messages(n: int) -> list[list[dict[str, str]]]:
    """n one-turn conversations: the questions of the chat data, cycled."""
    questions = [conversation[0]["content"] for conversation in chat_examples()]
    return [[{"role": "user", "content": questions[i % len(questions)]}] for i in range(n)]


@dataclass
class Reply:
    """One chat request's outcome: its text and completion tokens, or what went wrong."""

    text: str | None = None
    tokens: int = 0
    error: str | None = None


class ChatClient:
    """Greedy ``/v1/chat/completions`` requests to a Serve application, over one connection pool
    sized for ``concurrency`` requests in flight. Use it as ``async with``."""

    def __init__(self, url: str, concurrency: int, max_tokens: int, model: str | None = None):
        self.max_tokens, self.model = max_tokens, model
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._client = httpx.AsyncClient(base_url=url, timeout=600, limits=limits)

    async def __aenter__(self) -> "ChatClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def send(self, messages: list[dict[str, str]]) -> Reply:
        """One request; refusals, transport errors and malformed answers come back as ``error``."""
        body: dict[str, Any] = {"messages": messages, "max_tokens": self.max_tokens, "temperature": 0}
        if self.model:
            body["model"] = self.model
        try:
            r = await self._client.post("/v1/chat/completions", json=body)
        except httpx.HTTPError as exc:
            return Reply(error=f"{type(exc).__name__}: {exc}")
        if r.status_code != 200:
            return Reply(error=f"HTTP {r.status_code}: {r.text[:200]}")
        try:
            data = r.json()
            return Reply(data["choices"][0]["message"]["content"], data["usage"]["completion_tokens"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return Reply(error=f"malformed answer ({type(exc).__name__}: {exc}): {r.text[:200]}")


def sse_events(response: requests.Response) -> list[Any]:
    """The ``data:`` payloads of a streamed response, JSON-decoded (the final ``[DONE]`` stays a string)."""
    return parse_sse(line.decode() for line in response.iter_lines() if line)


def streamed_text(events: Iterable[Any]) -> str:
    """The text of a streamed chat completion: its chunks' ``delta.content`` joined."""
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if isinstance(e, dict) and e.get("choices"))


def chat_text(base_url: str, messages: list[Mapping[str, Any]], *, stream: bool = False, timeout_s: float = 120,
              **params: Any) -> str:
    """POST ``/v1/chat/completions`` and return the answer's text, streamed or not."""
    body = {"messages": list(messages), "stream": stream, **params}
    with requests.post(f"{base_url}/v1/chat/completions", json=body, stream=stream, timeout=timeout_s) as r:
        r.raise_for_status()
        return streamed_text(sse_events(r)) if stream else r.json()["choices"][0]["message"]["content"]


def post_raw(url: str, body: Any, timeout_s: float = 60) -> requests.Response:
    """POST ``body`` as it is: bytes are sent unchanged (broken JSON, another encoding), anything
    else JSON-encoded, so a notebook can show what a malformed request gets back."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(url, data=data, headers={"Content-Type": "application/json"}, timeout=timeout_s)
