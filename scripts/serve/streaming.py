"""Text that arrives in pieces, as a streamed generation brings it (no Ray, no Triton).

:class:`StopTrimmer` cuts the text at the first stop sequence even when the sequence spans two
pieces; :class:`IncrementalDetokenizer` turns token ids that arrive a few at a time into text
without breaking a character whose bytes span two pieces. Both pass text on as early as they
safely can, and both hand back what they held once the stream ends (``finish``). :func:`coalesced`
hands on, as one piece, what has arrived while the consumer was busy.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Iterable, TypeVar

T = TypeVar("T")


class StopTrimmer:
    """Cut the text at the first stop sequence, as OpenAI does (the engine returns it with the text).

    Streaming-safe: :meth:`feed` passes text on as soon as it cannot be the start of a stop
    sequence; :meth:`finish` returns what was held back.
    """

    def __init__(self, stops: Iterable[str]):
        self.stops = [s for s in stops if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.buffer = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.buffer += text
        cuts = [i for i in (self.buffer.find(s) for s in self.stops) if i >= 0]
        if cuts:
            out, self.buffer, self.stopped = self.buffer[:min(cuts)], "", True
            return out
        keep = min(self.hold, len(self.buffer))
        out, self.buffer = self.buffer[:len(self.buffer) - keep], self.buffer[len(self.buffer) - keep:]
        return out

    def finish(self) -> str:
        out, self.buffer = self.buffer, ""
        return out


class IncrementalDetokenizer:
    """Text from token ids that arrive a few at a time, as streamed responses bring them.

    Decoding each response on its own, as a stateless postprocessing model does, breaks every
    character whose bytes span two responses into U+FFFD (byte-level BPE splits most non-ASCII
    characters across tokens). This keeps the ids, decodes a window that starts at a character
    boundary, and passes text on only once it no longer ends in an unfinished character. Decoding
    from the same first token twice and taking the difference also keeps the spaces that
    SentencePiece-style decoders drop at the start of a text. The pieces add up to the decode of
    all the ids.
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True):
        self.tokenizer, self.skip_special_tokens = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.prefix = 0  # the window's first token: where the last text passed on began
        self.read = 0  # ids before this one have been passed on as text

    def _new_text(self) -> str:
        if self.read == len(self.ids):
            return ""
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)  # noqa: E731
        return decode(self.ids[self.prefix:])[len(decode(self.ids[self.prefix:self.read])):]

    def feed(self, ids: Iterable[int]) -> str:
        self.ids.extend(int(i) for i in ids)
        text = self._new_text()
        if not text or text.endswith("\ufffd"):  # nothing yet, or a character still missing bytes
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text

    def finish(self) -> str:
        """What is held back (a character that never got its last bytes comes out as U+FFFD)."""
        text = self._new_text()
        self.prefix = self.read = len(self.ids)
        return text


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()


async def coalesced(source: AsyncIterator[T], merge: Callable[[list[T]], T]) -> AsyncIterator[T]:
    """The items of ``source``, each batch that arrived while the consumer was busy merged into one.

    A task reads ``source`` as fast as it yields; the consumer gets everything read since its last
    turn, through ``merge``. A consumer that keeps up gets every item alone, as before; one that falls
    behind (a replica busy with many streams) does its per-item work (detokenizing, an SSE event, a
    message through Serve's proxy) once per batch instead of once per item. An error of ``source``
    comes after the items that came before it. Closing this generator (the client went away) cancels
    the reading task, which closes ``source`` (:meth:`scripts.triton.client.GrpcModel.generate` then
    cancels the Triton request).
    """
    queue: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(item)
            queue.put_nowait(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the consumer, in order
            queue.put_nowait(_Failed(exc))

    reader = asyncio.get_running_loop().create_task(pump())
    try:
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            items = [i for i in batch if i is not _END and not isinstance(i, _Failed)]
            if items:
                yield items[0] if len(items) == 1 else merge(items)
            last = batch[-1]
            if isinstance(last, _Failed):
                raise last.exc
            if last is _END:
                return
    finally:
        if not reader.done():
            reader.cancel()
            try:
                await reader
            except asyncio.CancelledError:
                pass
