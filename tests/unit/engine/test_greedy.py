"""scripts.engine.greedy: a layer's answer against run.py's reference, ids where the layer returns ids,
texts decoded one way."""
import pytest

from scripts.engine.greedy import Answer, differences, generate_ids, reference_text, reproduces
from scripts.model.tokenizer import decode_ids


@pytest.fixture(scope="module")
def tokenizer():
    from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer

    return train_tokenizer(TinyLlamaSpec())


@pytest.fixture(scope="module")
def row(tokenizer):
    """A reference row as the H200's 'The tokenizer turns': words, then continuation bytes that hold no
    character, and run.py's old text, vLLM's, which had dropped them."""
    continuation = tokenizer("é", add_special_tokens=False)["input_ids"][1]
    ids = tokenizer(" loads stopped qu", add_special_tokens=False)["input_ids"] + [continuation] * 14
    return {"input_text": "The tokenizer turns", "output_ids": ids, "output_text": " loads stopped qu"}


def test_the_reference_text_is_the_ids_decoded_not_the_text_stored_with_them(tokenizer, row):
    assert reference_text(tokenizer, row) == decode_ids(tokenizer, row["output_ids"]) == " loads stopped qu" + "\ufffd" * 14
    # the ensemble decodes the same ids the same way: it reproduces the reference, where the stored text said not
    ensemble = Answer(ids=row["output_ids"], text=decode_ids(tokenizer, row["output_ids"]))
    assert reproduces(row, ensemble, tokenizer) and ensemble.text != row["output_text"]


def test_each_thing_an_answer_carries_is_compared(tokenizer, row):
    ids, text = row["output_ids"], reference_text(tokenizer, row)
    assert differences(row, Answer(ids=ids[:-1] + [7], text=text, tokens=len(ids)), tokenizer) == ["ids"]
    assert differences(row, Answer(ids=ids, text=text[:-1]), tokenizer) == ["text"]
    assert differences(row, Answer(text=text, tokens=len(ids) - 1), tokenizer) == ["tokens"]
    assert differences(row, Answer(ids=[], text="", tokens=0), tokenizer) == ["ids", "text", "tokens"]
    assert reproduces(row, Answer(text=text, tokens=len(ids)), tokenizer)  # Serve: text and usage, no ids


def test_an_answer_with_nothing_to_compare_is_refused(tokenizer, row):
    with pytest.raises(ValueError, match="no ids, text or token count"):
        reproduces(row, Answer(), tokenizer)


def test_generate_ids_reads_beam_zero_up_to_the_sequence_length():
    assert generate_ids({"text_output": "x", "output_ids": [5, 6, 7], "sequence_length": 3}) == [5, 6, 7]
    assert generate_ids({"output_ids": [[5, 6, -1, -1]], "sequence_length": [2]}) == [5, 6]  # padding cut
    assert generate_ids({"output_ids": [5, 6]}) == [5, 6]
    assert generate_ids({"text_output": "x"}) is None  # a stock TensorRT-LLM ensemble returns no ids
