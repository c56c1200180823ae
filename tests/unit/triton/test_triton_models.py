import numpy as np
import pytest

from scripts.triton.backend import engine_stream as es
from scripts.triton.backend import request_handling as tm
from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TinyLlamaSpec())


def q(*texts):
    return np.array([[t.encode()] for t in texts], dtype=object)


def test_word_list_format_round_trip():
    packed = tm.to_word_list_format([[[5, 6], [7]], []])
    assert packed.shape == (2, 2, 3)
    assert packed[0].tolist() == [[5, 6, 7], [2, 3, -1]]
    assert packed[1].tolist() == [[0, 0, 0], [-1, -1, -1]]
    assert tm.from_word_list_format(packed[0]) == [[5, 6], [7]]
    assert tm.from_word_list_format(packed[1]) == []


def test_preprocessor_outputs_engine_tensors(tok):
    pre = tm.Preprocessor(tok, True, 512)
    out = pre(q("Ray Serve takes", "Triton"), np.array([[8], [4]], np.int32),
              stop_words=np.array([[b"Triton"], [b""]], dtype=object))
    assert out["INPUT_ID"].dtype == np.int32 and out["INPUT_ID"].shape[0] == 2
    assert out["INPUT_ID"][0, 0] == tok.bos_token_id
    assert out["REQUEST_INPUT_LEN"].tolist() == [[len(tok("Ray Serve takes")["input_ids"])], [len(tok("Triton")["input_ids"])]]
    assert out["REQUEST_OUTPUT_LEN"].tolist() == [[8], [4]]
    assert out["OUT_END_ID"].tolist() == [[tok.eos_token_id]] * 2
    assert tm.from_word_list_format(out["STOP_WORDS_IDS"][0]) == [tok("Triton", add_special_tokens=False)["input_ids"]]
    assert tm.from_word_list_format(out["STOP_WORDS_IDS"][1]) == []


@pytest.mark.parametrize("text,n,message", [
    (" ", 4, "text_input is empty"),
    ("hello", 0, "max_tokens must be a positive number of tokens, got 0"),
    ("hello", -3, "got -3"),
    ("Triton " * 600, 32, "more than the model's limit of 512 tokens"),
])
def test_preprocessor_rejects_bad_input(tok, text, n, message):
    with pytest.raises(ValueError, match=message):
        tm.Preprocessor(tok, True, 512)(q(text), np.array([[n]], np.int32))


def test_preprocessor_rejects_invalid_utf8(tok):
    with pytest.raises(ValueError, match="not valid UTF-8"):
        tm.Preprocessor(tok)(np.array([[b"\xff\xfe"]], dtype=object), np.array([[4]], np.int32))


def test_postprocess_decodes_up_to_length(tok):
    ids = tok("Ray Serve takes", add_special_tokens=False)["input_ids"]
    tokens = np.array([[ids + [0, 0]]], np.int32)
    out = tm.postprocess(tok, tokens, np.array([[len(ids)]], np.int32))
    assert out.shape == (1, 1) and out[0, 0] == b"Ray Serve takes"


def test_engine_request_greedy_by_default(tok):
    req = tm.engine_request({"input_ids": np.array([[0, 5, 6, 9]]), "input_lengths": np.array([[3]]),
                             "request_output_len": np.array([[8]])}, tok, 512)
    assert req.prompt_ids == [0, 5, 6] and req.max_tokens == 8 and not req.streaming
    assert req.sampling == {"max_tokens": 8, "temperature": 0.0}


def test_engine_request_sampling_stop_and_eos(tok):
    stop = tm.to_word_list_format([[tok("Triton", add_special_tokens=False)["input_ids"]]])
    req = tm.engine_request({"input_ids": np.array([[0, 5]]), "request_output_len": np.array([[4]]),
                             "end_id": np.array([[-1]]), "stop_words_list": stop, "runtime_top_k": np.array([[5]]),
                             "temperature": np.array([[0.7]], np.float32), "random_seed": np.array([[3]], np.uint64),
                             "streaming": np.array([[True]])}, tok, 512)
    assert req.sampling["ignore_eos"] and req.sampling["stop"] == ["Triton"] and req.sampling["top_k"] == 5
    assert req.sampling["temperature"] == pytest.approx(0.7) and req.sampling["seed"] == 3 and req.streaming


@pytest.mark.parametrize("inputs,message", [
    ({"input_ids": np.array([[1, 2], [3, 4]]), "request_output_len": np.array([[4], [4]])}, "one sequence per request"),
    ({"input_ids": np.array([[1, 2]]), "request_output_len": np.array([[0]])}, "positive number of tokens"),
    ({"input_ids": np.array([[1, 2]]), "input_lengths": np.array([[5]]), "request_output_len": np.array([[4]])}, "does not match"),
    ({"input_ids": np.array([[1] * 500]), "request_output_len": np.array([[32]])}, "more than the model's limit"),
    ({"input_ids": np.array([[1]]), "request_output_len": np.array([[4]]), "runtime_top_p": np.array([[1.5]])}, "top_p must be within"),
])
def test_engine_request_rejects_bad_input(tok, inputs, message):
    with pytest.raises(ValueError, match=message):
        tm.engine_request(inputs, tok, 512)


def test_sampling_from_json():
    assert es.sampling_from_json(None) == {}
    assert es.sampling_from_json('{"max_tokens": "8", "temperature": 0}') == {"max_tokens": 8, "temperature": 0}
    for text, message in [("{bad", "not valid JSON"), ("[1]", "must be a JSON object"),
                          ('{"max_token": 3}', "unknown sampling_parameters"), ('{"max_tokens": -1}', "must be positive"),
                          ('{"top_k": "x"}', "must be an integer")]:
        with pytest.raises(ValueError, match=message):
            es.sampling_from_json(text)


def test_token_out_requests_skip_vllms_detokenizer_unless_stop_strings_need_it():
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    plain = es.token_out_sampling({"max_tokens": 4, "temperature": 0.0}, None)
    assert plain == {"max_tokens": 4, "temperature": 0.0, "detokenize": False}
    assert SamplingParams(**plain).detokenize is False
    stopped = es.token_out_sampling({"max_tokens": 4, "stop": ["."]}, 3)
    assert stopped == {"max_tokens": 4, "stop": ["."], "stream_interval": 3}
    assert SamplingParams(**stopped).detokenize is True
    with pytest.raises(VLLMValidationError, match="only supported when detokenize is True"):
        SamplingParams(**(stopped | {"detokenize": False}))


def test_stream_interval_from_request_parameters():
    assert es.stream_interval(None) is None and es.stream_interval("{}") is None
    assert es.stream_interval('{"stream_interval": 4, "other": "x"}') == 4
    assert es.sampling_from_json('{"stream_interval": "2"}') == {"stream_interval": 2}
    for bad in ('{"stream_interval": 0}', '{"stream_interval": 2000}', '{"stream_interval": "4"}', '{"stream_interval": true}'):
        with pytest.raises(ValueError, match="stream_interval must be an integer from 1 to 1024"):
            es.stream_interval(bad)


def test_model_parameter():
    config = {"name": "m", "parameters": {"a": {"string_value": "x"}, "b": {"string_value": "${b}"}}}
    assert tm.model_parameter(config, "a") == "x"
    assert tm.model_parameter(config, "b", "d") == "d"
    with pytest.raises(ValueError, match="lacks parameter 'c': fill the template"):
        tm.model_parameter(config, "c")


def test_bad_words_become_a_logit_bias(tok):
    one = tok(" balances", add_special_tokens=False)["input_ids"]
    assert len(one) == 1
    req = tm.engine_request({"input_ids": np.array([[0, 5]]), "request_output_len": np.array([[4]]),
                             "bad_words_list": tm.to_word_list_format([[one]])}, tok, 512)
    assert req.sampling["logit_bias"] == {one[0]: -100.0}


def test_multi_token_bad_word_is_refused_not_ignored(tok):
    many = tok("balances", add_special_tokens=False)["input_ids"]
    assert len(many) > 1
    with pytest.raises(ValueError, match="bad word 'balances' is .* tokens; the cpu engine bans one-token words only"):
        tm.engine_request({"input_ids": np.array([[0, 5]]), "request_output_len": np.array([[4]]),
                           "bad_words_list": tm.to_word_list_format([[many]])}, tok, 512)


def test_cpu_length_message_is_unchanged(tok):
    text = "Triton " * 600
    n = len(tok(text)["input_ids"])
    with pytest.raises(ValueError) as info:
        tm.Preprocessor(tok, True, 512)(q(text), np.array([[32]], np.int32))
    assert str(info.value) == (f"the prompt has {n} tokens and max_tokens is 32: together more than the model's "
                               "limit of 512 tokens; shorten the prompt or lower max_tokens")


def test_prompt_over_max_input_len_is_refused_before_the_total(tok):
    # a TensorRT-LLM engine's two build limits: max_input_len (prompt) and max_seq_len (prompt + output)
    pre = tm.Preprocessor(tok, True, max_model_len=64, max_input_len=8)
    text = "Triton " * 20
    n = len(tok(text)["input_ids"])
    with pytest.raises(ValueError) as info:
        pre(q(text), np.array([[4]], np.int32))
    assert str(info.value) == (f"the prompt has {n} tokens, more than the engine's max_input_len of 8 tokens "
                               "(the longest prompt it was built for); shorten the prompt")
    short = "Triton"
    m = len(tok(short)["input_ids"])
    assert pre(q(short), np.array([[64 - m]], np.int32))["REQUEST_INPUT_LEN"].tolist() == [[m]]
    with pytest.raises(ValueError, match="together more than the model's limit of 64 tokens"):
        pre(q(short), np.array([[65 - m]], np.int32))


def test_check_request_size_limits():
    tm.check_request_size(8, 4, 12, 8)  # both limits exactly met
    tm.check_request_size(5000, 4, 0, 0)  # 0: no limit
    with pytest.raises(ValueError, match="max_input_len of 8 tokens"):
        tm.check_request_size(9, 1, 0, 8)
    with pytest.raises(ValueError, match="limit of 12 tokens"):
        tm.check_request_size(8, 5, 12, 8)
    with pytest.raises(ValueError, match="max_tokens must be a positive number of tokens, got None"):
        tm.check_request_size(1, None, 12, 8)


def test_gather_engine_outputs_joins_streamed_responses_per_beam():
    parts = [(np.array([[[5, -1]]], np.int32), np.array([[1]], np.int32)),
             (np.array([[[6, 7]]], np.int32), np.array([[2]], np.int32)),
             (np.array([[[8]]], np.int32), np.array([[1]], np.int32))]
    ids, lengths = tm.gather_engine_outputs(parts)
    assert ids.tolist() == [[[5, 6, 7, 8]]] and lengths.tolist() == [[4]] and ids.dtype == np.int32
    one = (np.array([[[5, 6, -1, -1]]], np.int32), np.array([[2]], np.int32))
    ids, lengths = tm.gather_engine_outputs([one])
    assert ids.tolist() == [[[5, 6]]] and lengths.tolist() == [[2]]
    with pytest.raises(ValueError, match="no tokens"):
        tm.gather_engine_outputs([])


class SpelledTokenizer:
    """Just enough of a tokenizer for longest_token_bytes: its vocabulary's spellings."""

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]


def test_longest_token_bytes_counts_utf8_bytes_of_the_spellings():
    # "▁" (SentencePiece's space) is 3 bytes; empty and unknown (None) spellings are skipped
    assert tm.longest_token_bytes(SpelledTokenizer(["", None, "a", "\u2581the", "<0xFF>", "\u00e9"])) == 6
    assert tm.longest_token_bytes(SpelledTokenizer(["ab", "\u00e9\u00e9"])) == 4
    assert tm.longest_token_bytes(SpelledTokenizer([])) == 1 and tm.longest_token_bytes(SpelledTokenizer([""])) == 1


def test_longest_token_bytes_bounds_every_token_of_the_tiny_model(tok):
    longest = tm.longest_token_bytes(tok)
    assert longest > 1
    assert max(len(tok.decode([i]).encode("utf-8")) for i in range(len(tok))) <= longest


def test_check_prompt_bytes_limit():
    tm.check_prompt_bytes("x" * 2 * 3 * 10, longest=3, max_model_len=10)  # exactly at the limit
    with pytest.raises(ValueError) as info:
        tm.check_prompt_bytes("x" * 61, longest=3, max_model_len=10)
    assert str(info.value) == ("the prompt is 61 bytes, more than any prompt of at most 10 tokens (the model's limit) "
                               "can be; shorten the prompt")
    with pytest.raises(ValueError, match="the prompt is 62 bytes"):
        tm.check_prompt_bytes("\u00e9" * 31, longest=3, max_model_len=10)  # bytes, not characters
    tm.check_prompt_bytes("x" * 10_000, longest=1, max_model_len=0)  # 0: no limit


class TokenizesShortTextsOnly:
    """A real tokenizer that fails the test if asked to tokenize a long text."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def __len__(self):
        return len(self.tokenizer)

    def __call__(self, text, **kwargs):
        assert len(text) <= 1000, f"tokenized a prompt of {len(text)} characters"
        return self.tokenizer(text, **kwargs)


@pytest.mark.parametrize("limits, tokens", [({"max_model_len": 512}, 512), ({"max_model_len": 64, "max_input_len": 8}, 8)])
def test_preprocessor_refuses_a_huge_prompt_without_tokenizing_it(tok, limits, tokens):
    pre = tm.Preprocessor(TokenizesShortTextsOnly(tok), True, **limits)
    assert pre.longest == tm.longest_token_bytes(tok)
    huge = "x" * (2 * pre.longest * tokens + 1)
    with pytest.raises(ValueError, match=f"the prompt is {len(huge)} bytes, more than any prompt of at most {tokens} tokens"):
        pre(q(huge), np.array([[4]], np.int32))
    assert pre(q("Ray Serve takes"), np.array([[4]], np.int32))["REQUEST_INPUT_LEN"].tolist() == [[len(tok("Ray Serve takes")["input_ids"])]]
