"""The repository's Python models (preprocessing, postprocessing, tensorrt_llm_bls) run under a
stand-in for the Python backend, calling each other as in Triton, with a stand-in TensorRT-LLM
engine model. No server, no GPU.

What the stand-ins do, and where upstream says so:
- ``InferenceRequest.exec()`` without ``decoupled=True`` on a decoupled model answers with an error
  response ("Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled
  models": triton-inference-server/python_backend@r25.02:src/request_executor.cc raises it,
  src/infer_request.cc turns it into the response's error); ``exec(decoupled=True)`` returns an
  iterator of responses for either kind of model, whose last one may be empty
  (python_backend@r25.02:README.md, BLS with decoupled models; src/request_executor.cc,
  InferResponseComplete).
- the engine answers as TensorRT-LLM's backend v0.17.0 does
  (triton-inference-server/tensorrtllm_backend@v0.17.0:inflight_batcher_llm/src/): it fails a request
  that does not ask for both output_ids and sequence_length (model_instance_state.cc,
  fillTritonResponse), refuses streaming unless decoupled (utils.cc, createRequestsFromInputTensors),
  sends output_ids [1, beams, len] padded with -1 and sequence_length [1, beams]; streamed, each
  response holds the new tokens only (NVIDIA/TensorRT-LLM llmRequest.cpp createResult, read at a
  later commit than v0.17.0).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from scripts.engine import config as engine
from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer
from scripts.profiles import load_profile
from scripts.triton.repository.fill import RepoSettings, fill_for_profile, read_model_config

FINAL = 1
DECOUPLED_EXEC_ERROR = ("Model tensorrt_llm - Error when running inference: Model tensorrt_llm is using the "
                        "decoupled. The current BLS request call doesn't support models using the decoupled "
                        "transaction policy. Please use 'decoupled=True' argument to the 'exec' or 'async_exec' "
                        "calls for decoupled models.'")


class Tensor:
    def __init__(self, name, array):
        self._name, self._array = name, np.asarray(array)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array


class TritonError:
    INVALID_ARG = "INVALID_ARG"
    INTERNAL = "INTERNAL"

    def __init__(self, message, code=INTERNAL):
        self._message, self.code = message, code

    def message(self):
        return self._message


class TritonModelException(Exception):
    pass


class InferenceResponse:
    def __init__(self, output_tensors=(), error=None):
        self._tensors, self._error = list(output_tensors), error

    def output_tensors(self):
        return self._tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


class Request:
    def __init__(self, tensors, sender=None):
        self.tensors, self.sender = {t.name(): t for t in tensors}, sender

    def get_response_sender(self):
        return self.sender


class Sender:
    def __init__(self):
        self.sent = []

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))


class Server:
    """The models of one repository, reachable from BLS requests."""

    def __init__(self):
        self.python_models, self.engines, self.decoupled = {}, {}, {}

    def exec(self, request, decoupled):
        name = request.model_name
        if name in self.engines:
            if self.decoupled[name] and not decoupled:
                return InferenceResponse(error=TritonError(DECOUPLED_EXEC_ERROR))
            responses = self.engines[name](request)
            if decoupled:
                return iter(responses + ([InferenceResponse()] if self.decoupled[name] else []))
            return responses[0]
        responses = self.python_models[name].execute([Request(request.inputs)])
        return iter(responses) if decoupled else responses[0]


def pb_utils_module(server: Server) -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")

    class InferenceRequest:
        def __init__(self, model_name, inputs, requested_output_names):
            self.model_name, self.inputs, self.requested = model_name, list(inputs), list(requested_output_names)

        def exec(self, decoupled=False):
            return server.exec(self, decoupled)

    module.__dict__.update(
        Tensor=Tensor, TritonError=TritonError, TritonModelException=TritonModelException,
        InferenceResponse=InferenceResponse, InferenceRequest=InferenceRequest,
        TRITONSERVER_RESPONSE_COMPLETE_FINAL=FINAL,
        get_input_tensor_by_name=lambda request, name: request.tensors.get(name),
        get_output_tensor_by_name=lambda response, name: next(
            (t for t in response.output_tensors() if t.name() == name), None),
        using_decoupled_model_transaction_policy=lambda config: bool(
            config.get("model_transaction_policy", {}).get("decoupled", False)),
    )
    return module


CONTINUATION = " Triton batches the requests"


def trtllm_engine(tokenizer, decoupled: bool):
    """A stand-in for the tensorrt_llm model (exclude_input_in_output true)."""
    calls = []

    def answer(request):
        inputs = {t.name(): t.as_numpy() for t in request.inputs}
        calls.append((inputs, request.requested))
        if not {"output_ids", "sequence_length"} <= set(request.requested):
            return [InferenceResponse(error=TritonError(
                "Error encountered while populating response: sequence_length tensor must be present in list of output tensors"))]
        streaming = "streaming" in inputs and bool(inputs["streaming"].reshape(-1)[0])
        if streaming and not decoupled:
            return [InferenceResponse(error=TritonError("Streaming is only supported if model is deployed using decoupled mode."))]
        tokens = tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"][: int(inputs["request_output_len"].reshape(-1)[0])]
        if streaming:
            return [InferenceResponse([Tensor("output_ids", np.array([[[t]]], np.int32)),
                                       Tensor("sequence_length", np.array([[1]], np.int32))]) for t in tokens]
        padded = np.full((1, 1, len(tokens) + 2), -1, np.int32)
        padded[0, 0, : len(tokens)] = tokens
        return [InferenceResponse([Tensor("output_ids", padded), Tensor("sequence_length", np.array([[len(tokens)]], np.int32))])]

    answer.calls = calls
    return answer


def load_model(repo: Path, name: str, monkeypatch, server: Server):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb_utils_module(server))
    spec = importlib.util.spec_from_file_location(f"test_{name}_model", repo / name / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = json_format.MessageToDict(read_model_config(repo, name), preserving_proto_field_name=True)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_name": name})  # as the stub passes them
    return model


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TinyLlamaSpec())


@pytest.fixture
def pipeline(build_root, tokenizer, monkeypatch):
    """A filled gpu-trtllm repository served by the stand-ins; decoupled or not."""

    def make(decoupled: bool):
        monkeypatch.setenv("LLAMA_MODEL_DIR", str(build_root / "tokenizer"))
        tokenizer.save_pretrained(build_root / "tokenizer")
        profile = load_profile("gpu-trtllm")
        engine.write_engine_config(profile)
        repo = Path(fill_for_profile(profile, RepoSettings(decoupled_mode=decoupled),
                                     output_dir=build_root / f"repo-{decoupled}")["repository"])
        server = Server()
        server.engines["tensorrt_llm"] = trtllm_engine(tokenizer, decoupled)
        server.decoupled["tensorrt_llm"] = decoupled
        for name in ("preprocessing", "postprocessing"):
            server.python_models[name] = load_model(repo, name, monkeypatch, server)
        return load_model(repo, "tensorrt_llm_bls", monkeypatch, server), server

    return make


def bls_request(prompt: str, max_tokens: int, stream: bool | None = None, sender=None) -> Request:
    tensors = [Tensor("text_input", np.array([[prompt.encode()]], dtype=object)),
               Tensor("max_tokens", np.array([[max_tokens]], np.int32))]
    if stream is not None:
        tensors.append(Tensor("stream", np.array([[stream]], bool)))
    return Request(tensors, sender)


def text(response) -> str:
    assert not response.has_error(), response.error().message()
    (tensor,) = response.output_tensors()
    return tensor.as_numpy().reshape(-1)[0].decode()


def test_not_decoupled_bls_answers_from_a_decoupled_engine(pipeline, tokenizer):
    # The BLS of a repository filled for the ensemble's streaming (engine decoupled) but called
    # without streaming: a plain exec() would get python_backend's "Please use 'decoupled=True'".
    bls, server = pipeline(decoupled=True)
    bls.decoupled = False  # as a non-decoupled BLS in front of the decoupled engine
    (response,) = bls.execute([bls_request("Ray Serve takes", 4)])
    expected = tokenizer.decode(tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"][:4])
    assert text(response) == expected
    inputs, requested = server.engines["tensorrt_llm"].calls[0]
    assert requested == ["output_ids", "sequence_length"]
    assert inputs["input_ids"].tolist() == [tokenizer("Ray Serve takes")["input_ids"]]


def test_decoupled_bls_not_streaming_sends_one_answer_then_final(pipeline, tokenizer):
    bls, _ = pipeline(decoupled=True)
    sender = Sender()
    assert bls.execute([bls_request("Ray Serve takes", 5, stream=False, sender=sender)]) is None
    (answer, flags), (last, last_flags) = sender.sent
    assert flags == 0 and last is None and last_flags == FINAL
    assert text(answer) == tokenizer.decode(tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"][:5])


def test_decoupled_bls_streams_one_response_per_engine_response(pipeline, tokenizer):
    bls, _ = pipeline(decoupled=True)
    sender = Sender()
    bls.execute([bls_request("Ray Serve takes", 3, stream=True, sender=sender)])
    *chunks, (last, last_flags) = sender.sent
    ids = tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"][:3]
    assert [text(r) for r, _ in chunks] == [tokenizer.decode([t]) for t in ids] and last_flags == FINAL


def test_not_decoupled_bls_gathers_a_streamed_engine_answer(pipeline, tokenizer):
    # stream=true reaches the (decoupled) engine, which streams; the BLS cannot, so it gathers
    bls, _ = pipeline(decoupled=True)
    bls.decoupled = False
    (response,) = bls.execute([bls_request("Ray Serve takes", 5, stream=True)])
    assert text(response) == tokenizer.decode(tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"][:5])


def test_not_decoupled_pipeline_still_answers(pipeline, tokenizer):
    bls, _ = pipeline(decoupled=False)
    (response,) = bls.execute([bls_request("Ray Serve takes", 2)])
    assert text(response) == tokenizer.decode(tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"][:2])


def test_engine_errors_reach_the_client(pipeline):
    bls, _ = pipeline(decoupled=False)
    (response,) = bls.execute([bls_request("Ray Serve takes", 2, stream=True)])
    assert response.has_error() and response.error().code == TritonError.INVALID_ARG
    assert "Streaming is only supported if model is deployed using decoupled mode" in response.error().message()


@pytest.mark.parametrize("decoupled", [False, True])
def test_a_prompt_over_max_input_len_is_invalid_arg_not_a_traceback(pipeline, decoupled):
    bls, server = pipeline(decoupled=decoupled)
    sender = Sender() if decoupled else None
    out = bls.execute([bls_request("Triton " * 1100, 8, sender=sender)])
    response = sender.sent[0][0] if decoupled else out[0]
    assert response.has_error() and response.error().code == TritonError.INVALID_ARG
    assert "more than the engine's max_input_len of 1024 tokens" in response.error().message()
    assert not server.engines["tensorrt_llm"].calls  # refused before the engine


def test_prompt_plus_output_over_max_seq_len_is_invalid_arg(pipeline, tokenizer):
    bls, server = pipeline(decoupled=False)
    prompt = "Triton " * 500
    n = len(tokenizer(prompt)["input_ids"])
    assert n <= 1024
    (response,) = bls.execute([bls_request(prompt, 2049 - n)])
    assert response.error().code == TritonError.INVALID_ARG
    assert response.error().message() == (
        f"the prompt has {n} tokens and max_tokens is {2049 - n}: together more than the model's limit of 2048 "
        "tokens; shorten the prompt or lower max_tokens")
    (ok,) = bls.execute([bls_request(prompt, 2048 - n)])  # at the limit: served
    assert not ok.has_error()
