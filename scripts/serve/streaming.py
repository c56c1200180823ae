"""Text that arrives in pieces, as a streamed generation brings it (no Ray, no Triton).

:class:`StopTrimmer` cuts the text at the first stop sequence even when the sequence spans two
pieces; :class:`IncrementalDetokenizer` turns token ids that arrive a few at a time into text
without breaking a character whose bytes span two pieces. Both pass text on as early as they
safely can, and both hand back what they held once the stream ends (``finish``).
"""
from __future__ import annotations

from typing import Any, Iterable

from scripts.model.tokenizer import decode_ids


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
    SentencePiece-style decoders drop at the start of a text. The pieces, with :meth:`finish`, add up
    to :func:`scripts.model.tokenizer.decode_ids` of all the ids, the decode every comparison uses.
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True):
        self.tokenizer, self.skip_special_tokens = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.prefix = 0  # the window's first token: where the last text passed on began
        self.read = 0  # ids before this one have been passed on as text

    def _new_text(self) -> str:
        if self.read == len(self.ids):
            return ""
        window, done = self.ids[self.prefix:], self.ids[self.prefix:self.read]
        return decode_ids(self.tokenizer, window, self.skip_special_tokens)[
            len(decode_ids(self.tokenizer, done, self.skip_special_tokens)):]

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


#: Texts tried by :func:`split_character_sample`, in order: characters of two to four UTF-8 bytes, which
#: byte-level BPE tokenizers store whole when common ("é", "😀" in Llama 3's vocabulary) and split when rare.
SPLIT_CANDIDATES = ("Café 😀", "Café 🦙", "naïve 🫠", "𝄞 clef", "ꙮ eyes")


def split_character_sample(tokenizer: Any, candidates: Iterable[str] = SPLIT_CANDIDATES) -> tuple[str, list[int]]:
    """A text of ``candidates`` that ``tokenizer`` encodes with a character split across tokens, and its ids.

    Decoding such ids one token at a time shows U+FFFD where a piece holds part of a character's bytes;
    which characters split depends on the vocabulary (the tiny Llama splits "😀", Llama 3.2 keeps it whole
    and splits "🦙"), so the sample is found here rather than fixed. :class:`ValueError` names every
    candidate and its pieces when none splits."""
    seen = {}
    for text in candidates:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        pieces = [tokenizer.decode([i]) for i in ids]
        if any("\ufffd" in piece for piece in pieces):
            return text, ids
        seen[text] = pieces
    raise ValueError(f"no candidate splits a character across tokens with this tokenizer: {seen}")
