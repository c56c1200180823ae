import json

import pytest

from scripts.serve.openai_api import (SSE_DONE, Generation, IncrementalDetokenizer, OpenAIError, StopTrimmer, adds_bos, chat_prompt, chunk_body,
                                decode_body, finish_reason, models_body, parse_chat_request, parse_completion_request,
                                parse_sse, resolve_max_tokens, response_body, sse)

MODEL = "tiny-llama"


class FakeTokenizer:
    """A tokenizer with a Llama-style chat template that starts with BOS, and BOS added on encode."""

    bos_token, bos_token_id, eos_token = "<s>", 0, "</s>"
    chat_template = "template"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        text = "<s>" + "".join(f"<|{m['role']}|>\n{m['content']}</s>\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")


def chat(body) -> Generation:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_chat_request(raw, MODEL, FakeTokenizer())


def error_of(fn, *args) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        fn(*args)
    return info.value


USER = [{"role": "user", "content": "What does Triton do?"}]


def test_chat_request_renders_the_template_with_one_bos():
    gen = chat({"model": MODEL, "messages": USER, "max_tokens": 8, "stop": " x", "temperature": 0})
    assert gen.prompt == "<|user|>\nWhat does Triton do?</s>\n<|assistant|>\n"
    assert (gen.kind, gen.max_tokens, gen.stop, gen.temperature, gen.stream) == ("chat", 8, [" x"], 0.0, False)
    assert gen.id.startswith("chatcmpl-") and gen.model == MODEL


def test_template_bos_kept_when_the_tokenizer_adds_none():
    class NoBos(FakeTokenizer):
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text]}

    assert not adds_bos(NoBos()) and adds_bos(FakeTokenizer())
    assert chat_prompt(NoBos(), USER).startswith("<s><|user|>")


def test_model_may_be_omitted_and_max_completion_tokens_is_accepted():
    gen = chat({"messages": USER, "max_completion_tokens": 5, "stream": True, "stream_options": {"include_usage": True}})
    assert gen.max_tokens == 5 and gen.stream and gen.include_usage


@pytest.mark.parametrize("body, status, param, words", [
    (b"{bad", 400, None, "not valid JSON"),
    (b"\xff\xfe{}", 400, None, "not valid UTF-8"),
    (b"", 400, None, "empty"),
    (b"[1, 2]", 400, None, "must be a JSON object"),
    ({}, 400, "messages", "'messages' is required"),
    ({"messages": []}, 400, "messages", "at least 1"),
    ({"messages": [{"role": "user", "content": "  "}]}, 400, "messages[0].content", "is empty"),
    ({"messages": [{"role": "user"}]}, 400, "messages[0].content", "required"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role", "'system', 'user' or 'assistant'"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content", "valid string"),
    ({"messages": USER + [{"role": "assistant", "content": "ok"}]}, 400, "messages", "end with a 'user'"),
    ({"messages": USER, "model": "gpt-4"}, 404, "model", "does not exist"),
    ({"messages": USER, "max_tokens": 0}, 400, "max_tokens", "at least 1"),
    ({"messages": USER, "max_tokens": -3}, 400, "max_tokens", "at least 1"),
    ({"messages": USER, "max_tokens": "eight"}, 400, "max_tokens", "valid integer"),
    ({"messages": USER, "max_tokens": 8.5}, 400, "max_tokens", "valid integer"),
    ({"messages": USER, "max_tokens": True}, 400, "max_tokens", "valid integer"),
    ({"messages": USER, "temperature": "hot"}, 400, "temperature", "valid number"),
    ({"messages": USER, "stop": 5}, 400, "stop", "a string or a list of strings"),
    ({"messages": USER, "temperature": 3}, 400, "temperature", "less than or equal to 2"),
    ({"messages": USER, "top_p": 0}, 400, "top_p", "greater than 0"),
    ({"messages": USER, "stream": "yes"}, 400, "stream", "valid boolean"),
    ({"messages": USER, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "up to 4"),
    ({"messages": USER, "stop": [""]}, 400, "stop", "non-empty"),
    ({"messages": USER, "n": 2}, 400, "n", "must be 1"),
    ({"messages": USER, "max_tokens": 4, "max_completion_tokens": 5}, 400, "max_tokens", "not two different"),
    ({"messages": "hi"}, 400, "messages", "valid list"),
])
def test_bad_chat_requests_get_openai_errors(body, status, param, words):
    err = error_of(chat, body)
    assert err.status == status and err.param == param, (err.status, err.param, err.message)
    if words:
        assert words in err.message, err.message
    body_json = err.body()["error"]
    assert set(body_json) == {"message", "type", "param", "code"} and body_json["type"] == "invalid_request_error"
    if status == 404:
        assert body_json["code"] == "model_not_found"


def test_completion_request_and_its_errors():
    gen = parse_completion_request(b'{"prompt": "Ray Serve takes", "max_tokens": 4}', MODEL)
    assert (gen.kind, gen.prompt, gen.max_tokens) == ("completion", "Ray Serve takes", 4) and gen.id.startswith("cmpl-")
    assert error_of(parse_completion_request, b'{"prompt": " "}', MODEL).param == "prompt"
    assert error_of(parse_completion_request, b'{"prompt": ["a"]}', MODEL).param == "prompt"
    assert "'prompt' is required" in error_of(parse_completion_request, b"{}", MODEL).message


def test_decode_body_returns_json():
    assert decode_body(b'{"a": 1}') == {"a": 1}


def gen_of(kind="chat", max_tokens=None, **kw) -> Generation:
    base = dict(kind=kind, model=MODEL, prompt="p", max_tokens=max_tokens, temperature=0.0, top_p=1.0, stop=[],
                stream=False, include_usage=False, seed=None, presence_penalty=0.0, frequency_penalty=0.0)
    return Generation(**(base | kw))


def test_max_tokens_against_the_model_length():
    assert resolve_max_tokens(gen_of(), prompt_tokens=10, max_model_len=512, default_max_tokens=64) == 64
    assert resolve_max_tokens(gen_of(), prompt_tokens=500, max_model_len=512, default_max_tokens=64) == 12
    assert resolve_max_tokens(gen_of(max_tokens=502), 10, 512, 64) == 502
    too_long = error_of(resolve_max_tokens, gen_of(max_tokens=600), 10, 512, 64)
    assert too_long.param == "max_tokens" and "more than the model's limit of 512" in too_long.message
    together = error_of(resolve_max_tokens, gen_of(max_tokens=510), 10, 512, 64)
    assert together.code == "context_length_exceeded" and "at most 502" in together.message
    full = error_of(resolve_max_tokens, gen_of(kind="completion"), 512, 512, 64)
    assert full.param == "prompt" and full.code == "context_length_exceeded"


def test_response_and_chunk_shapes():
    g = gen_of()
    body = response_body(g, "hello", "stop", 3, 2)
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    text = response_body(gen_of(kind="completion"), "hi", "length", 1, 1)
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == "hi"
    opener = chunk_body(g, text="", role=True)
    assert opener["object"] == "chat.completion.chunk" and opener["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "usage" not in opener
    last = chunk_body(g, reason="length")
    assert last["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    g.include_usage = True
    counted = chunk_body(g, usage_counts={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    assert counted["choices"] == [] and counted["usage"]["total_tokens"] == 2
    assert chunk_body(g, text="a")["usage"] is None  # OpenAI: null on every chunk but the last
    assert finish_reason(8, 8) == "length" and finish_reason(3, 8) == "stop"


def test_sse_round_trip():
    stream = sse({"a": 1}) + sse({"b": "x"}) + SSE_DONE
    assert stream.endswith("data: [DONE]\n\n")
    assert parse_sse(stream.splitlines()) == [{"a": 1}, {"b": "x"}, "[DONE]"]


def test_models_body():
    assert models_body(MODEL, 7) == {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 7, "owned_by": "triton"}]}


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


def test_words_keep_their_spaces_with_a_sentencepiece_style_decoder(metaspace_tokenizer):
    text = "Triton loads the traffic"
    ids = metaspace_tokenizer(text)["input_ids"]
    assert "".join(metaspace_tokenizer.decode([i]) for i in ids) != text  # the trap: spaces lost
    pieces, rest = stream(metaspace_tokenizer, ids, [1] * len(ids))
    assert "".join(pieces) + rest == text == metaspace_tokenizer.decode(ids)
