import pytest

from scripts.lab.examples import pick_stop_word, says_word
from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer


class WordTokenizer:
    """One token per word unless the word is listed as split."""

    def __init__(self, split=()):
        self.split = set(split)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [0, 1] if text in self.split else [0]}


def test_picks_the_first_single_token_word_after_the_skipped_ones():
    text = " the traffic, balances it, scales the replicas"
    assert pick_stop_word(text, WordTokenizer()) == " traffic"
    assert pick_stop_word(text, WordTokenizer(split={" traffic"})) == " balances"


def test_skips_words_that_occur_twice():
    assert pick_stop_word(" a b b c", WordTokenizer()) == " c"


def test_refuses_when_no_word_qualifies():
    with pytest.raises(ValueError, match="raise max_tokens"):
        pick_stop_word(" one", WordTokenizer())


def test_with_the_tiny_llama_tokenizer():
    tokenizer = train_tokenizer(TinyLlamaSpec())
    word = pick_stop_word(" the traffic, balances it, scales the replicas", tokenizer)
    assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1



def test_stop_word_falls_back_to_a_token_of_noise():
    """A random-weights model says no word the tokenizer keeps whole; a word piece of its text does."""
    tokenizer = train_tokenizer(TinyLlamaSpec())
    text = "orts reposiveblerom\ufffdice intoTriton\ufffd\ufffd"
    word = pick_stop_word(text, tokenizer)
    assert word.strip() and text.count(word) == 1
    assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1


def bpe_like_tokenizer():
    """A Hugging Face tokenizer with one token per space-led word, " the" and " they" distinct."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [" the", " they", " sun", " came", " rose", "<unk>"]
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r" ?\w+"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def test_a_banned_word_is_found_by_its_tokens_not_as_a_substring():
    tokenizer = bpe_like_tokenizer()
    assert " the" in " they came" and not says_word(" they came", " the", tokenizer)
    assert says_word(" the sun rose", " the", tokenizer) and says_word(" they came", " they", tokenizer)
    assert says_word(" the sun rose", " sun rose", tokenizer) and not says_word(" the sun came", " sun rose", tokenizer)


def test_a_word_without_tokens_is_refused():
    with pytest.raises(ValueError, match="encodes to no token"):
        says_word(" the sun", "", bpe_like_tokenizer())
