"""The engine model called directly, token ids in and out (notebook 04, section 4).

Clients normally call the ensemble; calling the engine model itself (``tensorrt_llm`` or
``vllm_engine``) is how a reader checks the engine's ids against ``run.py``'s. The request is built
from the engine model's own ``config.pbtxt``, because the two engines answer differently: the
TensorRT-LLM backend must be asked for ``sequence_length`` together with ``output_ids`` and returns
the prompt before the generated tokens unless ``exclude_input_in_output`` is set; the cpu engine
returns the generated tokens only. :func:`generated_ids` reads either.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scripts.model.tokenizer import end_and_pad_ids, load_tokenizer
from scripts.triton.backend.request_handling import ENGINE_OUTPUTS

#: NumPy dtypes of the config data types an engine model's inputs use.
NUMPY_DTYPES = {"TYPE_INT32": np.int32, "TYPE_INT64": np.int64, "TYPE_UINT64": np.uint64, "TYPE_FP32": np.float32,
                "TYPE_BOOL": np.bool_}


@dataclass(frozen=True)
class EngineModelRequest:
    """One request to an engine model (``tensorrt_llm`` or ``vllm_engine``), built from its config."""

    model_name: str
    inputs: dict[str, np.ndarray]  # name -> the array to send, batch dimension first
    outputs: tuple[str, ...]  # the outputs to request
    prompt_length: int
    # Whether beam 0 of output_ids starts with the prompt: TensorRT-LLM answers a request that is not
    # streamed with prompt + generated tokens unless exclude_input_in_output is true.
    output_includes_prompt: bool


def _backend_bool(value: str) -> bool | None:
    """A parameter as TensorRT-LLM's backend reads a bool (tensorrtllm_backend@v0.17.0:
    inflight_batcher_llm/src/model_state.cc, GetParameter<bool>); None where it would not parse."""
    if value in ("True", "true", "TRUE", "1"):
        return True
    if value in ("False", "false", "FALSE", "0"):
        return False
    return None


class EngineInputs:
    """Builds the tensors of direct requests to one engine model, from its ``config.pbtxt`` (read once).

    :meth:`build` fills ``input_ids``, ``input_lengths`` and ``request_output_len`` (and ``streaming``
    when asked), plus any of TensorRT-LLM's optional inputs given as keywords (``end_id``, ``pad_id``,
    ``stop_words_list``, ``runtime_top_k``, ``runtime_top_p``, ``temperature``, ``random_seed``,
    ``presence_penalty``, ``frequency_penalty``, ...: the names of
    tensorrtllm_backend@v0.17.0:all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt, which
    this repository's other engine models declare too). Names, data types and shapes come from the
    config: every input it requires must be one a request fills, each shaped ``[1, *dims]`` (a batch
    of one) with its ``-1`` filled from the value's size.
    """

    def __init__(self, model_repository: str | Path, model_name: str | None = None):
        from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

        from scripts.triton.repository.fill import read_model_config, repository_facts  # noqa: PLC0415

        repo = Path(model_repository)
        self.model_name = model_name or repository_facts(repo).engine_model
        config = read_model_config(repo, self.model_name)
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        self.batched = config.max_batch_size > 0
        self.backend = config.backend
        self.declared = {tensor.name: tensor for tensor in config.input}
        self.dtype_names = {name: model_config_pb2.DataType.Name(t.data_type) for name, t in self.declared.items()}
        missing = sorted(name for name, t in self.declared.items() if not t.optional and name not in self.FILLED)
        if missing:
            raise ValueError(f"{self.model_name} requires input {', '.join(map(repr, missing))}, which a direct engine "
                             "request does not fill")
        outputs = {tensor.name for tensor in config.output}
        needed = ENGINE_OUTPUTS if self.backend == "tensorrtllm" else ENGINE_OUTPUTS[:1]
        absent = [name for name in needed if name not in outputs]
        if absent:
            raise ValueError(f"{self.model_name} declares no output {', '.join(map(repr, absent))}, which this request needs")
        self.outputs = tuple(name for name in ENGINE_OUTPUTS if name in outputs)
        self.exclude_input = ""
        if "exclude_input_in_output" in config.parameters:
            self.exclude_input = config.parameters["exclude_input_in_output"].string_value

    #: The inputs every request fills.
    FILLED = ("input_ids", "input_lengths", "request_output_len", "streaming")

    def output_includes_prompt(self, streaming: bool) -> bool:
        # Not streamed, TensorRT-LLM returns prompt + generated tokens per beam unless
        # exclude_input_in_output is true (default false, also when the value does not parse:
        # tensorrtllm_backend@v0.17.0:inflight_batcher_llm/src/model_instance_state.cc; what the
        # executor puts in a result: NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/llmRequest.cpp,
        # LlmRequest::createResult, read at a later commit than v0.17.0). Streamed, each response holds
        # only the tokens that are new since the previous one, whatever that parameter says.
        return self.backend == "tensorrtllm" and not streaming and not _backend_bool(self.exclude_input)

    def end_and_pad(self, tokenizer: Any, ignore_eos: bool = False) -> dict[str, list[int] | None]:
        """``end_id`` and ``pad_id`` for :meth:`build`, as run.py and the ensemble's preprocessing set
        them (:func:`scripts.model.tokenizer.end_and_pad_ids`); None for one this model does not declare.
        Without ``end_id`` TensorRT-LLM's executor does not stop at EOS: the backend passes an absent
        ``end_id`` on as none (tensorrtllm_backend@v0.17.0:inflight_batcher_llm/src/utils.cc:842-917)."""
        end_id, pad_id = end_and_pad_ids(tokenizer, ignore_eos)
        return {"end_id": [end_id] if "end_id" in self.declared and end_id is not None else None,
                "pad_id": [pad_id] if "pad_id" in self.declared and pad_id is not None else None}

    def build(self, prompt_ids: list[int], max_tokens: int, *, streaming: bool = False,
              **optional: Any) -> dict[str, np.ndarray]:
        """The input tensors of one request; ``optional`` maps more input names to values (lists or
        arrays; None: not sent)."""
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("prompt_ids is empty: send at least one token")
        if int(max_tokens) <= 0:
            raise ValueError(f"max_tokens must be a positive number of tokens, got {max_tokens}")
        if streaming and not self.decoupled:
            # TensorRT-LLM: "Streaming is only supported if model is deployed using decoupled mode."
            # (tensorrtllm_backend@v0.17.0:inflight_batcher_llm/src/utils.cc, createRequestsFromInputTensors)
            raise ValueError(f"{self.model_name} is not decoupled, so it cannot stream: fill the repository with "
                             "decoupled_mode true")
        values: dict[str, Any] = {"input_ids": prompt, "input_lengths": [len(prompt)], "request_output_len": [int(max_tokens)]}
        if streaming:
            values["streaming"] = [True]
        values.update({name: value for name, value in optional.items() if value is not None})
        undeclared = sorted(set(values) - set(self.declared))
        if undeclared:
            raise ValueError(f"{self.model_name} declares no input {', '.join(map(repr, undeclared))}")
        inputs: dict[str, np.ndarray] = {}
        for name, value in values.items():
            dtype_name = self.dtype_names[name]
            if dtype_name not in NUMPY_DTYPES:
                raise ValueError(f"{self.model_name} input {name!r} is {dtype_name}, not a type this request sends")
            array = np.asarray(value, dtype=NUMPY_DTYPES[dtype_name]).reshape(-1)
            dims = [int(d) for d in self.declared[name].dims]
            known = int(np.prod([d for d in dims if d != -1])) if dims else 1
            if dims.count(-1) > 1 or known == 0 or array.size % known or (-1 not in dims and array.size != known):
                raise ValueError(f"{self.model_name} input {name!r} has dims {dims}: it cannot hold {array.size} values")
            shape = ([1] if self.batched else []) + [array.size // known if d == -1 else d for d in dims]
            inputs[name] = array.reshape(shape)
        return inputs


def engine_model_request(model_repository: str | Path, prompt_ids: list[int], max_tokens: int, *,
                         model_name: str | None = None, streaming: bool = False, ignore_eos: bool = False,
                         tokenizer: Any = None) -> EngineModelRequest:
    """The request that sends ``prompt_ids`` straight to the engine model of a filled repository
    (:class:`EngineInputs`); ``model_name`` defaults to the engine step of the repository's ensemble.
    Send ``inputs`` and ask for ``outputs`` (:func:`tritonclient_args`), then read the answer with
    :func:`generated_ids`.

    It stops at EOS as run.py does, unless ``ignore_eos``: ``end_id`` and ``pad_id`` come from
    ``tokenizer``, by default the one the repository's preprocessing model loads (as Serve's does).

    TensorRT-LLM's backend takes the prompt as the whole ``input_ids`` row of a batch of one: it
    cuts rows to ``input_lengths`` only in batches of several (tensorrtllm_backend@v0.17.0:
    inflight_batcher_llm/src/utils.cc, splitBatchInputsTensors), so no padding is sent.
    """
    engine = EngineInputs(model_repository, model_name)
    if tokenizer is None:
        from scripts.triton.repository.fill import repository_facts  # noqa: PLC0415

        tokenizer = _tokenizer(repository_facts(Path(model_repository)).tokenizer_dir)
    inputs = engine.build(prompt_ids, max_tokens, streaming=streaming, **engine.end_and_pad(tokenizer, ignore_eos))
    return EngineModelRequest(engine.model_name, inputs, engine.outputs, len(prompt_ids),
                              engine.output_includes_prompt(streaming))


def _tokenizer(tokenizer_dir: str) -> Any:
    """The tokenizer a repository's preprocessing model loads."""
    if not (Path(tokenizer_dir) / "tokenizer_config.json").is_file():
        raise ValueError(f"no tokenizer at {tokenizer_dir} (the preprocessing model's tokenizer_dir), whose EOS id "
                         "an engine request needs: make the model first (notebook 00_check_environment)")
    return load_tokenizer(tokenizer_dir)


def generated_ids(request: EngineModelRequest, outputs: dict[str, np.ndarray]) -> list[int]:
    """The generated token ids of one engine response (beam 0), without the prompt.

    ``output_ids`` is ``[1, beams, tokens]``, padded past each beam's ``sequence_length``
    (tensorrtllm_backend@v0.17.0:inflight_batcher_llm/src/model_instance_state.cc,
    fillTritonResponse); where the request says the prompt comes first, it is cut off. The cpu
    engine model returns the generated ids alone. A streamed answer is the concatenation of what
    this returns for each of its responses.
    """
    ids = np.asarray(outputs["output_ids"])
    beam = ids.reshape(-1, ids.shape[-1])[0] if ids.size else np.zeros(0, dtype=np.int32)
    if outputs.get("sequence_length") is not None:
        beam = beam[: int(np.asarray(outputs["sequence_length"]).reshape(-1)[0])]
    if request.output_includes_prompt:
        beam = beam[request.prompt_length:]
    return [int(t) for t in beam]


def tritonclient_args(request: EngineModelRequest, client_module) -> tuple[list, list]:
    """``(inputs, outputs)`` for ``client.infer(request.model_name, inputs, outputs=outputs)`` with
    ``tritonclient.http`` or ``tritonclient.grpc`` (``client_module``)."""
    from tritonclient.utils import np_to_triton_dtype  # noqa: PLC0415

    inputs = []
    for name, array in request.inputs.items():
        tensor = client_module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs, [client_module.InferRequestedOutput(name) for name in request.outputs]
