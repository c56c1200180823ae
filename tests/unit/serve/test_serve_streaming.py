import pytest

from scripts.model.tokenizer import decode_ids
from scripts.serve.streaming import IncrementalDetokenizer, StopTrimmer, split_character_sample


@pytest.mark.parametrize("pieces, stops, text, stopped", [
    ([" the", " traffic", ",", " bal", "ances", " it"], [" balances"], " the traffic,", True),
    ([" the traffic, balances it"], [" balances"], " the traffic,", True),
    (["ab", "c"], [], "abc", False),
    (["a", "b", "c"], ["x", "bc"], "a", True),
    (["abc"], ["zz"], "abc", False),
])
def test_stop_trimmer_cuts_at_the_first_stop_sequence(pieces, stops, text, stopped):
    trimmer = StopTrimmer(stops)
    out = "".join(trimmer.feed(p) for p in pieces) + trimmer.finish()
    assert out == text and trimmer.stopped == stopped


# -- streamed token ids to text -----------------------------------------------------------------

TEXT = "Café naïve 😀 ok"


@pytest.fixture(scope="module")
def tiny_tokenizer():
    """The tiny model's byte-level BPE tokenizer, trained here as notebook 01 trains it."""
    from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer

    return train_tokenizer(TinyLlamaSpec())


@pytest.fixture(scope="module")
def llama_tokenizer():
    """Llama 3.2's own tokenizer (a registry package ships its tokenizer.json: scripts.model.reference_tokenizer)."""
    from transformers import AutoTokenizer

    from scripts.model.reference_tokenizer import llama32_tokenizer_dir

    return AutoTokenizer.from_pretrained(llama32_tokenizer_dir())


@pytest.fixture(scope="module")
def metaspace_tokenizer():
    """A SentencePiece-style tokenizer (Llama 2, Mistral): words start with U+2581, and the decoder
    drops the space that this gives the first word of a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.train_from_iterator(["Ray Serve takes the traffic", "Triton loads the model and batches"],
                            trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>"], show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def stream(tokenizer, ids, sizes, skip_special_tokens=True):
    detokenizer, pieces, start = IncrementalDetokenizer(tokenizer, skip_special_tokens), [], 0
    for size in sizes:
        pieces.append(detokenizer.feed(ids[start:start + size]))
        start += size
    return pieces, detokenizer.finish()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_streamed_ids_become_whole_characters(tiny_tokenizer, size):
    ids = tiny_tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert "\ufffd" in "".join(tiny_tokenizer.decode([i]) for i in ids)  # the trap: one token at a time
    pieces, rest = stream(tiny_tokenizer, ids, [size] * len(ids))
    assert "".join(pieces) + rest == TEXT and rest == ""
    assert not any("\ufffd" in p for p in pieces)


def test_special_tokens_are_skipped_or_kept_as_postprocessing_does(tiny_tokenizer):
    ids = tiny_tokenizer(TEXT, add_special_tokens=False)["input_ids"] + [tiny_tokenizer.eos_token_id]
    pieces, rest = stream(tiny_tokenizer, ids, [1] * len(ids))
    assert "".join(pieces) + rest == TEXT
    pieces, rest = stream(tiny_tokenizer, ids, [1] * len(ids), skip_special_tokens=False)
    assert "".join(pieces) + rest == TEXT + "</s>"


def test_a_character_that_never_completes_comes_out_at_the_end(tiny_tokenizer):
    ids = tiny_tokenizer("é", add_special_tokens=False)["input_ids"]
    assert len(ids) == 2  # two bytes, two tokens
    pieces, rest = stream(tiny_tokenizer, ids[:1], [1])
    assert pieces == [""] and rest == "\ufffd" == tiny_tokenizer.decode(ids[:1])



@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_the_pieces_add_up_to_the_one_full_decode_even_with_stray_bytes(tiny_tokenizer, size):
    """A greedy answer of random weights can end in tokens that hold no whole character (the H200 reference
    for 'The tokenizer turns' ends in 14 continuation bytes): they come out as U+FFFD, as a full decode
    gives them, at any cut of the stream, and mid-text as at the end."""
    continuation = tiny_tokenizer("é", add_special_tokens=False)["input_ids"][1]  # the second byte of "é" alone
    words = tiny_tokenizer(" qu", add_special_tokens=False)["input_ids"]
    for ids in (words + [continuation] * 14, [continuation] + words + [continuation, continuation] + words):
        whole = decode_ids(tiny_tokenizer, ids)
        assert "\ufffd" in whole and whole == tiny_tokenizer.decode(ids, skip_special_tokens=True)
        pieces, rest = stream(tiny_tokenizer, ids, [size] * len(ids))
        assert "".join(pieces) + rest == whole
    assert decode_ids(tiny_tokenizer, words + [continuation] * 14).endswith("\ufffd" * 14)

def test_words_keep_their_spaces_with_a_sentencepiece_style_decoder(metaspace_tokenizer):
    text = "Triton loads the traffic"
    ids = metaspace_tokenizer(text)["input_ids"]
    assert "".join(metaspace_tokenizer.decode([i]) for i in ids) != text  # the trap: spaces lost
    pieces, rest = stream(metaspace_tokenizer, ids, [1] * len(ids))
    assert "".join(pieces) + rest == text == metaspace_tokenizer.decode(ids)


def test_llama_tokenizer_is_the_real_one(llama_tokenizer):
    assert llama_tokenizer("Hello world", add_special_tokens=False)["input_ids"] == [9906, 1917]
    assert len(llama_tokenizer) >= 128_256


def test_the_split_sample_is_found_for_each_vocabulary(tiny_tokenizer, llama_tokenizer):
    # Llama 3.2 keeps "é" and "😀" whole ([34, 2642, 978, 91416]): notebook 05's fixed "Café 😀" showed no
    # U+FFFD there. The sample is looked for instead, and holds a split character with both vocabularies.
    assert llama_tokenizer("Café 😀", add_special_tokens=False)["input_ids"] == [34, 2642, 978, 91416]
    assert split_character_sample(llama_tokenizer) == ("Café 🦙", [34, 2642, 978, 11410, 99, 247])
    for tokenizer in (tiny_tokenizer, llama_tokenizer):
        text, ids = split_character_sample(tokenizer)
        assert "\ufffd" in "".join(tokenizer.decode([i]) for i in ids)
        pieces, rest = stream(tokenizer, ids, [1] * len(ids))
        assert "".join(pieces) + rest == text and rest == "" and not any("\ufffd" in p for p in pieces)


def test_no_split_sample_names_what_each_candidate_gave(llama_tokenizer):
    with pytest.raises(ValueError, match="no candidate splits") as caught:
        split_character_sample(llama_tokenizer, ["Café 😀", "plain"])
    assert "'Café 😀'" in str(caught.value) and "plain" in str(caught.value)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_streamed_llama_ids_become_whole_characters(llama_tokenizer, size):
    ids = llama_tokenizer(TEXT + " 🦙 ꙮ", add_special_tokens=False)["input_ids"]
    pieces, rest = stream(llama_tokenizer, ids, [size] * len(ids))
    assert "".join(pieces) + rest == TEXT + " 🦙 ꙮ" and rest == ""
    assert not any("\ufffd" in p for p in pieces)
