"""LLMService over a fake Triton: what each route's request turns into, and back."""
import asyncio
import json
import os

import pytest

from scripts.serve.openai_api import OpenAIError, parse_sse
from scripts.serve.service import max_body_bytes
from scripts.triton.client import Chunk

from fakes import CHUNKS, CHUNKS_TEXT, ByteTokenizer, FakeTokenizer, fake_service

USER = [{"role": "user", "content": "What does Triton do?"}]


def run(coro):
    return asyncio.run(coro)


def body(data) -> bytes:
    return data if isinstance(data, bytes) else json.dumps(data).encode()


def stream_events(reply_coro):
    """Await a streamed reply and read its events on one event loop (as Serve does: a second
    ``asyncio.run`` would find the engine's generator closed by the first one's shutdown)."""
    async def go():
        events = await reply_coro
        assert not isinstance(events, dict), "a streamed request got a whole body"
        return parse_sse("".join([event async for event in events]).splitlines())
    return run(go())


def test_chat_completion_counts_usage_and_sends_greedy_inputs():
    service = fake_service()
    reply = run(service.chat_completions(body({"messages": USER, "max_tokens": 10, "temperature": 0})))
    assert reply["choices"][0]["message"]["content"] == CHUNKS_TEXT
    sent = service.backend.calls[0]
    prompt_tokens = len(FakeTokenizer()(sent["text_input"][0, 0].decode())["input_ids"])
    assert reply["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 4, "total_tokens": prompt_tokens + 4}
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert sent["max_tokens"][0, 0] == 10 and "temperature" not in sent and not sent["stream"][0, 0]


def test_sampling_parameters_reach_triton():
    service = fake_service()
    run(service.completions(body({"prompt": "Ray", "temperature": 0.5, "seed": 3, "stop": "x"})))
    sent = service.backend.calls[0]
    assert sent["temperature"][0, 0] == pytest.approx(0.5) and sent["random_seed"][0, 0] == 3
    assert sent["top_k"][0, 0] == len(service.tokenizer)  # the vocabulary, smaller than TensorRT-LLM's cap
    assert list(sent["stop_words"][0]) == [b"x"]


def test_finish_reason_length_and_default_max_tokens():
    service = fake_service([Chunk("x" * 8, 8)], default_max_tokens=8)
    reply = run(service.completions(body({"prompt": "Ray"})))
    assert reply["choices"][0]["finish_reason"] == "length" and service.backend.calls[0]["max_tokens"][0, 0] == 8


def test_stop_sequences_are_cut_from_the_text():
    service = fake_service([Chunk(" the traffic, balances", 4)])
    reply = run(service.completions(body({"prompt": "Ray Serve takes", "stop": [" balances"], "max_tokens": 12})))
    assert reply["choices"][0]["text"] == " the traffic," and reply["choices"][0]["finish_reason"] == "stop"


def test_streaming_chat_sends_role_deltas_finish_usage_and_done():
    service = fake_service()
    events = stream_events(service.chat_completions(body({"messages": USER, "max_tokens": 4, "stream": True,
                                                          "stream_options": {"include_usage": True}})))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["choices"][0]["delta"]["content"] for e in events[1:4]] == ["Triton", " loads", " the model"]
    assert events[4]["choices"][0]["finish_reason"] == "length"
    assert events[5]["choices"] == [] and events[5]["usage"]["completion_tokens"] == 4
    assert events[6] == "[DONE]" and service.backend.calls[0]["stream"][0, 0]
    assert len({e["id"] for e in events[:-1]}) == 1  # one completion, one id


def test_a_stop_sequence_split_across_streamed_chunks_is_cut():
    service = fake_service([Chunk("Triton lo", 2), Chunk("ads the", 2), Chunk(" model", 1)])
    events = stream_events(service.completions(body({"prompt": "p", "stop": ["loads"], "stream": True})))
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "Triton "
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_streamed_text_is_decoded_from_the_ids_so_characters_stay_whole():
    # "é" is two bytes, so two tokens in two responses: postprocessing turns each into U+FFFD.
    pieces = [("Caf", [67, 97, 102]), ("\ufffd", [0xC3]), ("\ufffd", [0xA9]), (" ok", [32, 111, 107])]
    service = fake_service([Chunk(text, len(ids), ids) for text, ids in pieces], tokenizer=ByteTokenizer())
    events = stream_events(service.completions(body({"prompt": "p", "max_tokens": 8, "stream": True, "stop": [" o"]})))
    deltas = [e["choices"][0]["text"] for e in events[:-2]]
    assert "".join(deltas) == "Café" and "é" in deltas and events[-2]["choices"][0]["finish_reason"] == "stop"


def test_a_repository_that_is_not_decoupled_streams_in_one_piece():
    service = fake_service([Chunk("Triton loads", 2)], decoupled=False)
    events = stream_events(service.completions(body({"prompt": "p", "max_tokens": 4, "stream": True})))
    assert not service.backend.calls[0]["stream"][0, 0]  # a plain model refuses stream=true
    assert events[0]["choices"][0]["text"] == "Triton loads" and events[-1] == "[DONE]"


def test_triton_errors_become_500_before_the_stream_and_an_error_event_during_it():
    with pytest.raises(OpenAIError) as info:
        run(fake_service(fail=0).chat_completions(body({"messages": USER, "stream": True})))
    assert info.value.status == 500 and info.value.type == "server_error"
    assert info.value.message == "Triton could not serve the request: engine failed"
    with pytest.raises(OpenAIError) as info:
        run(fake_service(fail=1).chat_completions(body({"messages": USER})))
    assert info.value.status == 500
    events = stream_events(fake_service(fail=2).chat_completions(body({"messages": USER, "stream": True})))
    assert [e["choices"][0]["delta"].get("content") for e in events[:2]] == ["", "Triton"]
    assert events[-2]["error"]["message"] == "Triton could not serve the request: engine failed" and events[-1] == "[DONE]"


def test_requests_too_long_for_the_model_are_refused_before_triton():
    service = fake_service()
    with pytest.raises(OpenAIError) as info:
        run(service.completions(body({"prompt": "x" * 60, "max_tokens": 10})))
    assert info.value.code == "context_length_exceeded" and not service.backend.calls


def test_max_body_bytes_is_a_mib_or_64_bytes_a_token():
    assert max_body_bytes(64) == max_body_bytes(512) == max_body_bytes(16384) == 1 << 20  # the 1 MiB floor
    assert max_body_bytes(16385) == 64 * 16385 and max_body_bytes(131072) == 8 << 20
    assert fake_service().max_body_bytes == 1 << 20 and fake_service(max_model_len=32768).max_body_bytes == 2 << 20


class LongTextRefusingTokenizer(FakeTokenizer):
    """Tokenizes short texts only (the chat template's BOS probe): a long prompt must never reach it."""

    def __call__(self, text, add_special_tokens=True):
        if len(text) > 16:
            raise AssertionError(f"tokenized a prompt of {len(text)} characters")
        return super().__call__(text, add_special_tokens)


@pytest.mark.parametrize("route, request_body, param", [
    ("completions", {"prompt": "x" * 129}, "prompt"),
    ("completions", {"prompt": "\u00e9" * 65}, "prompt"),  # 65 characters, 130 bytes
    ("chat_completions", {"messages": [{"role": "user", "content": "x" * 200}]}, "messages"),
])
def test_a_prompt_too_large_for_any_tokenization_is_refused_before_tokenizing(route, request_body, param):
    """FakeTokenizer's longest token is 1 byte: a 64-token model takes no prompt beyond 2 * 1 * 64 bytes."""
    service = fake_service(tokenizer=LongTextRefusingTokenizer())
    assert service.longest_token == 1
    with pytest.raises(OpenAIError) as info:
        run(getattr(service, route)(body(request_body)))
    assert (info.value.status, info.value.code, info.value.param) == (400, "context_length_exceeded", param)
    assert "more than any prompt of at most 64 tokens (the model's limit) can be" in info.value.message
    assert not service.backend.calls


def test_invalid_requests_are_refused_before_triton():
    service = fake_service()
    with pytest.raises(OpenAIError) as info:
        run(service.chat_completions(body({"model": "gpt-4o", "messages": USER})))
    assert info.value.status == 404 and not service.backend.calls


def test_generate_and_its_errors():
    service = fake_service()
    assert run(service.generate("Ray", 4)) == {"text": CHUNKS_TEXT,
                                               "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}}
    assert service.backend.calls[0]["max_tokens"][0, 0] == 4
    for query, max_tokens, param in ((" ", 4, "query"), ("Ray", 0, "max_tokens")):
        with pytest.raises(OpenAIError) as info:
            run(service.generate(query, max_tokens))
        assert info.value.status == 400 and info.value.param == param
    assert len(service.backend.calls) == 1


def test_health_and_readiness_follow_triton():
    service = fake_service()
    assert run(service.health()) == (200, {"status": "ok"})
    run(service.check_ready())
    service.backend.is_ready = False
    assert run(service.health()) == (503, {"status": "loading"})
    with pytest.raises(RuntimeError, match="Triton model 'ensemble' is not ready"):
        run(service.check_ready())


def test_models_lists_the_served_model():
    listed = fake_service().models()["data"]
    assert [m["id"] for m in listed] == ["tiny-llama"] and listed[0]["owned_by"] == "triton"


def test_triton_info_adds_the_replica_and_its_gpus_to_the_backends_facts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    info = fake_service(decoupled=False).triton_info("replica-1")
    assert info == {"mode": "fake", "model": "ensemble", "replica": "replica-1", "replica_pid": os.getpid(),
                    "decoupled": False, "cuda_visible_devices": "0"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert fake_service().triton_info("replica-1")["cuda_visible_devices"] is None


def test_close_stops_triton_once():
    service = fake_service()
    service.close()
    service.close()
    assert service.backend.stops == 1

