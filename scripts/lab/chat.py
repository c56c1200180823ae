"""Small HTTP clients for the Serve application's routes, as notebook 05 calls them."""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import requests

from scripts.serve.openai_api import parse_sse


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


def all_distinct(items: Iterable[Mapping[str, Any]], key: str) -> bool:
    """Whether every item has its own non-empty ``key`` (each replica its own Triton PID, port ...)."""
    values = [item.get(key) for item in items]
    return all(values) and len(set(values)) == len(values)
