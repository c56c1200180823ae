"""A Python-based Triton backend that serves transformers' continuous batching (``gpu-transformers``).

Triton loads it as ``backends/transformers/model.py`` for models whose config says
``backend: "transformers"``: the ensemble's engine step ``transformers_engine``, with TensorRT-LLM's
engine tensors (``input_ids``, ``request_output_len``, ``end_id``, ``stop_words_list`` ... ->
``output_ids``, ``sequence_length``) and its settings from the ``engine_dir`` parameter's
``engine_config.json``.

One engine (model plus continuous-batching manager, :class:`scripts.engine.transformers_cb.Engine`)
per model instance. On ``KIND_GPU`` Triton gives each instance a device (``model_instance_device_id``);
the engine loads there and sizes its KV cache from the memory free at that moment, so a second
instance on the same GPU gets a fraction of what the first left. ``execute`` hands each request to an
asyncio loop on its own thread and returns at once; the manager's thread calls back per token, and
requests that arrive while others generate join the running batch.
"""
from __future__ import annotations

import asyncio
import json
import locale
import threading
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from scripts.engine.config import read_engine_config
from scripts.engine.transformers_cb import Engine, EngineRequestError, refuse_sampling, stop_position
from scripts.triton.backend.request_handling import engine_request, from_word_list_format, log_initialized, model_parameter

NAMES = ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "stop_words_list",
         "bad_words_list", "runtime_top_k", "runtime_top_p", "temperature", "repetition_penalty",
         "presence_penalty", "frequency_penalty", "random_seed", "streaming")


def invalid(message: str):
    """An error response the client sees as a 4xx (INVALID_ARG)."""
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


def ids_response(ids: list[int]):
    arr = np.array(ids, dtype=np.int32).reshape(1, 1, -1)
    return pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor("output_ids", arr),
        pb_utils.Tensor("sequence_length", np.array([[arr.shape[-1]]], dtype=np.int32)),
    ])


class TritonPythonModel:
    def initialize(self, args):
        locale.setlocale(locale.LC_ALL, "")  # the stub starts in the C locale; torch reads UTF-8 files
        self.model_config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self.model_config)
        config = read_engine_config(model_parameter(self.model_config, "engine_dir"))
        from scripts.model.tokenizer import load_tokenizer  # noqa: PLC0415 - transformers

        self.tokenizer = load_tokenizer(config.get("tokenizer_dir") or config["model_dir"])
        self.max_model_len = int(config["max_model_len"])
        device = f"cuda:{args['model_instance_device_id']}" if args.get("model_instance_kind") == "GPU" else "cpu"
        self.engine = Engine(config, instance_device=device)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="transformers-loop", daemon=True)
        self.thread.start()
        log_initialized(args["model_name"], "transformers backend")

    def execute(self, requests):
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._handle(request), self.loop)
        return None

    def _read(self, request):
        inputs = {}
        for name in NAMES:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            inputs[name] = tensor.as_numpy() if tensor is not None else None
        if inputs["bad_words_list"] is not None and any(from_word_list_format(inputs["bad_words_list"])):
            # before engine_request, whose bad-word limits are the vLLM engine's
            raise EngineRequestError("this engine (transformers continuous batching) does not support bad_words: leave it out")
        req = engine_request(inputs, self.tokenizer, self.max_model_len)
        refuse_sampling(req.sampling)
        return req

    async def _handle(self, request):
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            req = self._read(request)
        except (ValueError, EngineRequestError) as exc:
            sender.send(invalid(str(exc)), flags=final)
            return
        if req.streaming and not self.decoupled:
            sender.send(invalid("streaming=true needs a decoupled model: fill the templates with decoupled_mode true"), flags=final)
            return
        outputs: asyncio.Queue = asyncio.Queue()
        rid = uuid.uuid4().hex
        self.engine.manager.register_result_handler(rid, outputs.put_nowait)
        stops = req.sampling.get("stop") or []
        finished = False
        try:
            self.engine.add(req.prompt_ids, req.max_tokens, ignore_eos=bool(req.sampling.get("ignore_eos")),
                            stop_token_ids=req.sampling.get("stop_token_ids") or (), request_id=rid)
            sent = checked = 0  # ids sent (streaming); ids looked at for stop strings
            while True:
                out = await outputs.get()
                finished = out.is_finished()
                if out.error:
                    sender.send(invalid(f"engine error: {out.error}"), flags=final)
                    return
                if request.is_cancelled():
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("request cancelled")), flags=final)
                    return
                ids = list(out.generated_tokens)
                cut = stop_position(self.tokenizer, ids, stops, checked)
                checked = len(ids)
                done = finished or cut is not None
                if cut is not None:
                    ids = ids[:cut]
                if req.streaming:
                    if len(ids) > sent:
                        sender.send(ids_response(ids[sent:]))
                        sent = len(ids)
                    if done:
                        sender.send(flags=final)
                        return
                elif done:
                    sender.send(ids_response(ids), flags=final)
                    return
        except Exception as exc:  # the engine refused the request: tell the client, keep serving
            sender.send(invalid(f"{type(exc).__name__}: {exc}"), flags=final)
        finally:
            if not finished:  # a stop word, the client's cancel or an error ended it early
                self.engine.cancel(rid)

    def finalize(self):
        try:
            self.engine.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
