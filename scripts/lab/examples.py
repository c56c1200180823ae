"""Example inputs that notebooks derive from what the model actually says, so the same cell
teaches the same thing whichever model a profile serves."""
from __future__ import annotations

import re
from typing import Any


def pick_stop_word(text: str, tokenizer: Any, skip: int = 1) -> str:
    """A word of ``text`` (with its leading space) that the tokenizer encodes as one token, after the
    first ``skip`` words, to show ``stop_words`` and ``bad_words`` on the model's own output.

    One token because the cpu engine bans a bad word with a logit bias on its single token (and
    refuses longer ones); TensorRT-LLM bans token sequences of any length, so one token suits both.
    """
    words = re.findall(r" \w+", text)
    for word in words[skip:]:
        if len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1 and text.count(word) == 1:
            return word
    # A model whose text is noise (random weights) may say no such word: then a token of its text that
    # is a word piece of its own, e.g. "ice" of "repos ice", does the same job.
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    for piece in (tokenizer.decode([i]) for i in ids[skip:]):
        if re.fullmatch(r" ?\w{2,}", piece) and text.count(piece) == 1 \
                and len(tokenizer(piece, add_special_tokens=False)["input_ids"]) == 1:
            return piece
    raise ValueError(f"no single-token word occurring once after the first {skip} word(s) of {text!r}: "
                     "generate a longer text (raise max_tokens) to pick a stop word from")


def says_word(text: str, word: str, tokenizer: Any) -> bool:
    """Whether ``text`` holds ``word`` as a ``bad_words`` entry bans it: the word's token ids, in a row,
    among the text's. A substring test is wrong here: ``" the"`` is inside ``" they"``, a token the ban
    leaves alone (TensorRT-LLM and the cpu engine's logit bias both ban token ids)."""
    word_ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if not word_ids:
        raise ValueError(f"{word!r} encodes to no token: pass the word as the request's bad_words has it")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    n = len(word_ids)
    return any(ids[i:i + n] == word_ids for i in range(len(ids) - n + 1))
