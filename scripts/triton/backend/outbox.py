"""How the vLLM engine model hands its responses to Triton: from the engine's event loop, or from
threads of their own (the engine config's ``response_threads``; scripts.triton.backend.vllm_backend).

Every ``send()`` of a Python-backend response, and every ``is_cancelled()``, is a round trip to the
``tritonserver`` process that the calling thread waits out (python_backend r24.09,
``src/response_sender.cc`` ``ResponseSender::Send`` and ``src/pb_cancel.cc``; both release the GIL
while they wait). Sent from the event loop that also takes vLLM's outputs, those waits are added to
every decode step for every stream. With ``threads`` > 0 the loop only queues; each request's
responses go out in order from one of the threads (requests are dealt to them in turn), the
cancellation flag is read after each send, as Triton's own vLLM backend does from its one response
thread (triton-inference-server/vllm_backend, ``src/model.py``, ``_response_loop``), and chunks of one
request that are still queued when their thread comes to them leave as one response: a thread that
falls behind sends fewer, larger responses instead of a growing backlog.

Pure Python (the sender and the response maker are passed in), unit-tested without a server.
"""
from __future__ import annotations

import itertools
import queue
import sys
import threading
from typing import Any, Callable, Sequence

#: makes one response from token ids and text: the engine model's ``_response`` for one request
Respond = Callable[[list[int], str], Any]


def thread_count(value: Any) -> int:
    """``value`` as a count of response threads: a whole number >= 0, else ValueError saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"response_threads must be a whole number >= 0, got {value!r}")
    return value


class Outbox:
    """``threads`` 0: each response is sent where it is made (the caller waits for tritonserver);
    more: that many sending threads. ``final_flag``: ``pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL``."""

    def __init__(self, threads: int, final_flag: int):
        self.final_flag = final_flag
        self.queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(thread_count(threads))]
        self.threads = [threading.Thread(target=self._run, args=(q,), name=f"responses-{i}", daemon=True)
                        for i, q in enumerate(self.queues)]
        for thread in self.threads:
            thread.start()
        self._turn = itertools.count()

    def stream(self, sender, respond: Respond) -> "ResponseStream":
        """The responses of one request, sent through ``sender`` (its ``InferenceResponseSender``)."""
        q = self.queues[next(self._turn) % len(self.queues)] if self.queues else None
        return ResponseStream(sender, respond, q, self.final_flag)

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued, then stop the threads."""
        for q in self.queues:
            q.put(None)
        for thread in self.threads:
            thread.join(timeout=timeout_s)

    @staticmethod
    def _run(q: queue.SimpleQueue) -> None:
        while (stream := q.get()) is not None:
            stream._flush()


class ResponseStream:
    """One request's responses, in the order they were given. ``put`` adds a chunk of streamed tokens;
    ``send`` a whole response (a result, an error) or, with None, the final flag alone; ``finish`` ends a
    stream whose last chunk was not final. ``cancelled``:
    whether Triton has cancelled the request (the client went away), as of the last response sent."""

    def __init__(self, sender, respond: Respond, q: queue.SimpleQueue | None, final_flag: int):
        self.sender, self.respond, self.queue, self.final_flag = sender, respond, q, final_flag
        self.items: list[tuple] = []
        self.lock = threading.Lock()
        self.scheduled = False
        self.closed = False   # the final response went out, or a send failed: later items are dropped
        self.final_given = False
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        if self.queue is None and not self._cancelled:
            return self.sender.is_cancelled()
        return self._cancelled

    def put(self, token_ids: Sequence[int], text: str, final: bool = False) -> None:
        self._add(("chunk", list(token_ids), text, final))

    def send(self, response: Any = None, final: bool = True) -> None:
        self._add(("response", response, final))

    def finish(self) -> None:
        """The final flag alone, unless a final response was given already (the last chunk carries it)."""
        if not self.final_given:
            self.send(None, final=True)

    def _add(self, item: tuple) -> None:
        self.final_given = self.final_given or item[-1]
        if self.queue is None:
            self._deliver([item])
            return
        with self.lock:
            self.items.append(item)
            if self.scheduled:
                return
            self.scheduled = True
        self.queue.put(self)

    def _flush(self) -> None:
        with self.lock:
            items, self.items, self.scheduled = self.items, [], False
        self._deliver(items)

    def _deliver(self, items: list[tuple]) -> None:
        for response, final in merged(items, self.respond):
            if self.closed:
                return
            try:
                if response is None:
                    self.sender.send(flags=self.final_flag if final else 0)
                else:
                    self.sender.send(response, flags=self.final_flag if final else 0)
                if final:
                    self.closed = True
                elif self.queue is not None:
                    self._cancelled = self.sender.is_cancelled()
            except Exception as exc:  # the request is gone on Triton's side: say so, keep the others going
                self.closed = True
                self._cancelled = True  # the loop then aborts it in the engine, which frees its KV cache
                print(f"vllm backend: a response could not be sent ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def merged(items: list[tuple], respond: Respond) -> list[tuple[Any, bool]]:
    """``(response, final)`` pairs for queued items: consecutive chunks joined into one response (their
    ids and text in order; final if the last of them is, or if the final flag alone follows them),
    whole responses as they are."""
    out: list[tuple[Any, bool]] = []
    ids: list[int] = []
    text, final, pending = "", False, False
    for item in items:
        if item[0] == "chunk":
            ids, text, final, pending = ids + item[1], text + item[2], item[3], True
            continue
        if pending and item[1] is None and item[2]:  # the final flag alone: it goes with the chunk before it
            final = True
            continue
        if pending:
            out.append((respond(ids, text), final))
            ids, text, final, pending = [], "", False, False
        out.append((item[1], item[2]))
    if pending:
        out.append((respond(ids, text), final))
    return out
