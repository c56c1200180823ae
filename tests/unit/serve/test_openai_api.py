import json

import numpy as np
import pytest

from scripts.serve.openai_api import (SSE_DONE, Generation, OpenAIError, adds_bos, chat_prompt, chunk_body, decode_body,
                                      finish_reason, models_body, parse_chat_request, parse_completion_request, parse_sse,
                                      resolve_max_tokens, response_body, sse)

from fakes import FakeTokenizer

MODEL = "tiny-llama"


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
    ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content", "a list of content parts"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content", "reads text only"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, 400, "messages[0].content", "text' is required"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]}, 400, "messages[0].content", "is empty"),
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


def test_ignore_eos_reaches_the_ensemble_as_no_end_id():
    """vLLM's ``ignore_eos`` extension (benchmarks ask every answer to be max_tokens long): the ensemble
    gets ``end_id`` -1, TensorRT-LLM's "no end id", which the engine models read as ignore_eos."""
    from scripts.triton.sampling import EnsembleRequest, ensemble_inputs

    gen = parse_completion_request(b'{"prompt": "hi", "max_tokens": 8, "ignore_eos": true}', "tiny-llama")
    assert gen.ignore_eos
    inputs = ensemble_inputs(EnsembleRequest(gen.prompt, 8, ignore_eos=gen.ignore_eos), vocab_size=10)
    assert inputs["end_id"].dtype == np.int32 and inputs["end_id"][0, 0] == -1
    assert "end_id" not in ensemble_inputs(EnsembleRequest("hi", 8), vocab_size=10)
    with pytest.raises(OpenAIError, match="ignore_eos"):
        parse_completion_request(b'{"prompt": "hi", "ignore_eos": "yes"}', "tiny-llama")


def test_stream_interval_is_vllms_extension_checked_here():
    assert parse_completion_request(b'{"prompt": "hi", "stream_interval": 4}', "tiny-llama").stream_interval == 4
    assert parse_completion_request(b'{"prompt": "hi"}', "tiny-llama").stream_interval is None
    for bad in (b"0", b"1025", b'"4"'):
        with pytest.raises(OpenAIError, match="stream_interval"):
            parse_completion_request(b'{"prompt": "hi", "stream_interval": ' + bad + b"}", "tiny-llama")


def test_content_given_as_text_parts_reads_as_the_joined_text():
    """The standard list-of-parts form (openai's typed messages, LangChain, vllm bench serve) renders
    the same prompt as the plain string."""
    parts = [{"type": "text", "text": "What does"}, {"type": "text", "text": "Triton do?"}]
    as_parts = parse_chat_request(json.dumps({"messages": [{"role": "user", "content": parts}]}).encode(), "m", FakeTokenizer())
    as_text = parse_chat_request(json.dumps({"messages": [{"role": "user", "content": "What does\nTriton do?"}]}).encode(),
                                 "m", FakeTokenizer())
    assert as_parts.prompt == as_text.prompt
