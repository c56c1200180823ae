"""A Python-based Triton backend that serves vLLM with continuous batching (``cpu``, ``gpu-vllm``).

Why it is built this way, and the sources: docs/design/triton.md.
"""
from __future__ import annotations

import asyncio
import faulthandler
import gc
import json
import locale
import os
import threading
import uuid
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from scripts.engine.config import (VLLM_OWN_DEFAULTS, VLLM_OWN_KEYS, read_engine_config, vllm_engine_args_class,
                                   vllm_engine_kwargs, vllm_environment)
from scripts.model.tokenizer import load_tokenizer
from scripts.triton.backend.engine_stream import (ChunkBuffer, instance_gpu_env, sampling_from_json, stream_interval,
                                                  token_out_sampling)
from scripts.triton.backend.outbox import Outbox
from scripts.triton.backend.request_handling import (log_initialized, check_prompt_bytes, check_prompt_text, check_request_size,
                                                     decode_texts, engine_request, longest_token_bytes, model_parameter)

TOKEN_MODE_INPUTS = {"input_ids"}
STACKS_AFTER_S = float(os.environ.get("TUTORIAL_ENGINE_STACKS_AFTER_S", "150"))  # a start takes 20-80 s on two busy cores
TEXT_MODE_INPUT = "text_input"


def invalid(message: str):
    """An error response the client sees as a 4xx (INVALID_ARG)."""
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


def scheduler_gauges(gauges: dict):
    """A vLLM stat logger factory (``AsyncLLM.from_engine_args(stat_loggers=...)``, vllm 0.32
    ``vllm/v1/metrics/loggers.py``, ``StatLoggerBase``) that copies each step's scheduler stats
    (``vllm/v1/metrics/stats.py``, ``SchedulerStats``) into two of Triton's custom gauges,
    ``gauges["waiting"]`` and ``gauges["kv_cache"]``: looked up at each step, so that emptying the
    dict lets the gauges go while the engine (and its loggers) may still be referenced."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class SchedulerGauges(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            if scheduler_stats is not None and gauges:
                gauges["waiting"].set(scheduler_stats.num_waiting_reqs)
                gauges["kv_cache"].set(scheduler_stats.kv_cache_usage)

        def log_engine_initialized(self):
            pass

    return SchedulerGauges


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        """A text-in model gets ``max_batch_size: 0``: vLLM batches continuously by itself, so Triton
        must hand each request over at once, as Triton's official vLLM backend decides in its
        ``auto_complete_config`` (triton-inference-server/vllm_backend, ``src/model.py``). A config
        that asks for more fails to load with the stub's own message ("configuration specified
        max_batch_size 8, but in auto-complete-config function ... specified max_batch_size 0");
        the token-in engine step keeps its batching for the ensemble."""
        config = auto_complete_model_config.as_dict()
        if TEXT_MODE_INPUT in {tensor["name"] for tensor in config.get("input", [])}:
            auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args):
        # The stub starts in the C locale; torch (imported by vLLM) reads its templates as UTF-8.
        locale.setlocale(locale.LC_ALL, "")
        self.model_config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self.model_config)
        inputs = {i["name"] for i in self.model_config["input"]}
        self.token_mode = TOKEN_MODE_INPUTS <= inputs
        if self.token_mode:
            config = read_engine_config(model_parameter(self.model_config, "engine_dir"))
        else:
            model_json = Path(args["model_repository"]) / args["model_version"] / "model.json"
            if not model_json.is_file():
                raise pb_utils.TritonModelException(f"{model_json} is missing: write the engine arguments there (notebook 02)")
            config = json.loads(model_json.read_text())
        os.environ.update(vllm_environment(config))
        # KIND_GPU: the engine's processes see only this instance's GPU
        os.environ.update(instance_gpu_env(args.get("model_instance_kind"), args.get("model_instance_device_id"),
                                           os.environ.get("CUDA_VISIBLE_DEVICES")))
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.async_llm import AsyncLLM

        self.SamplingParams, self.OutputKind = SamplingParams, RequestOutputKind
        # vLLM 0.26 (gpu-vllm) has no per-request stream_interval: this backend joins the chunks itself
        self.own_interval = "stream_interval" not in getattr(SamplingParams, "__struct_fields__", ("stream_interval",))
        # model.json: vLLM engine arguments, plus our own settings (VLLM_OWN_KEYS: the KV-cache space,
        # an environment setting above, and how the engine starts its processes)
        kwargs = vllm_engine_kwargs(config) if self.token_mode else {k: v for k, v in config.items() if k not in VLLM_OWN_KEYS}
        engine_args_class = vllm_engine_args_class(config.get("start_method", VLLM_OWN_DEFAULTS["start_method"]))
        self.max_model_len = int(kwargs.get("max_model_len") or 0)
        self.tokenizer = load_tokenizer(kwargs.get("tokenizer") or kwargs["model"])
        self.longest_token = longest_token_bytes(self.tokenizer)
        # who sends the responses to Triton: the event loop itself (0) or threads of their own (outbox.py says why)
        self.outbox = Outbox(int(config.get("response_threads", VLLM_OWN_DEFAULTS["response_threads"])),
                             pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-loop", daemon=True)
        self.thread.start()
        # On Triton's metrics port, beside its own nv_* metrics (the Python backend's custom metrics):
        # what the engine holds now, the requests whose client went away (their KV cache freed), and
        # the scheduler's own numbers. A metric works only while its family lives: keep them all.
        labels = {"model": args["model_name"], "version": args["model_version"]}
        gauge, counter = pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.COUNTER
        self.metric_families = [
            pb_utils.MetricFamily(name="tutorial_engine_requests_running", kind=gauge,
                                  description="requests the vLLM engine of this model is generating"),
            pb_utils.MetricFamily(name="tutorial_engine_requests_cancelled_total", kind=counter,
                                  description="requests aborted in the vLLM engine because Triton cancelled them "
                                              "(the client went away)"),
            pb_utils.MetricFamily(name="tutorial_engine_requests_waiting", kind=gauge,
                                  description="requests vLLM's scheduler holds back (no room in the KV cache or batch)"),
            pb_utils.MetricFamily(name="tutorial_engine_kv_cache_usage", kind=gauge,
                                  description="fraction of the KV cache blocks in use (vLLM's scheduler, 0 to 1)")]
        self.running, self.cancelled, waiting, kv_cache = (family.Metric(labels=labels) for family in self.metric_families)
        self.gauges = {"waiting": waiting, "kv_cache": kv_cache}
        del waiting, kv_cache
        # An engine start that has not finished after STACKS_AFTER_S writes every thread's stack into
        # the server's log (the stub's stderr), once: a start that hangs can then be told from a slow one.
        faulthandler.dump_traceback_later(STACKS_AFTER_S, exit=False)
        try:
            self.engine = self.submit(self._make_engine(AsyncLLM, engine_args_class(**kwargs),
                                                        scheduler_gauges(self.gauges))).result()
        except BaseException:  # no finalize() follows a failed initialize(): let the metrics go here
            self.engine = None
            self.outbox.close()
            self._stop_loop()
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()
        self.active: set[str] = set()
        # straight into the server's log (no IPC): a load that stalls after this line is the server's
        log_initialized(args["model_name"], "vllm backend")

    async def _make_engine(self, cls, engine_args, stat_logger):
        return cls.from_engine_args(engine_args, stat_loggers=[stat_logger])

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def execute(self, requests):
        for request in requests:
            self.submit(self._handle(request))
        return None

    async def _handle(self, request):
        sender = request.get_response_sender()
        request_id = uuid.uuid4().hex
        try:
            if self.token_mode:
                prompt, sampling, stream, exclude = self._token_request(request)
            else:
                prompt, sampling, stream, exclude = self._text_request(request)
            interval = sampling.pop("stream_interval", None) if self.own_interval else None
            params = self.SamplingParams(**sampling)
        except (ValueError, TypeError) as exc:  # TypeError: a sampling key this vLLM does not know
            self.outbox.stream(sender, None).send(invalid(str(exc)))
            return
        if stream and not self.decoupled:
            self.outbox.stream(sender, None).send(invalid("stream=true needs a decoupled model: fill the templates with decoupled_mode true"))
            return
        params.output_kind = self.OutputKind.DELTA if stream else self.OutputKind.FINAL_ONLY
        self.active.add(request_id)
        self.running.set(len(self.active))
        chunks = ChunkBuffer(interval or 1)
        out_stream = self.outbox.stream(sender, lambda ids, text: self._response(prompt, ids, text, exclude_prompt=True))
        try:
            async for out in self.engine.generate(prompt, params, request_id):
                if out_stream.cancelled:
                    await self.engine.abort(request_id)
                    self.cancelled.increment(1)
                    out_stream.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("request cancelled")))
                    return
                completion = out.outputs[0]
                if stream:
                    chunk = chunks.add(completion.token_ids, completion.text, finished=out.finished)
                    if chunk:
                        out_stream.put(*chunk, final=out.finished)
                elif out.finished:
                    out_stream.send(self._response(prompt, completion.token_ids, completion.text, exclude_prompt=exclude))
                    return
            out_stream.finish()
        except Exception as exc:  # the engine rejected the request: tell the client, keep serving
            out_stream.send(invalid(f"{type(exc).__name__}: {exc}"))
        finally:
            self.active.discard(request_id)
            self.running.set(len(self.active))

    def _token_request(self, request):
        names = ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "stop_words_list",
                 "bad_words_list", "runtime_top_k", "runtime_top_p", "temperature", "repetition_penalty",
                 "presence_penalty", "frequency_penalty", "random_seed", "streaming")
        inputs = {}
        for name in names:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            inputs[name] = tensor.as_numpy() if tensor is not None else None
        req = engine_request(inputs, self.tokenizer, self.max_model_len)
        sampling = token_out_sampling(req.sampling, stream_interval(request.parameters()))
        return {"prompt_token_ids": req.prompt_ids}, sampling, req.streaming, True

    def _text_request(self, request):
        text = decode_texts(pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1, 1), "text_input")[0]
        check_prompt_text(text)
        get = lambda n: pb_utils.get_input_tensor_by_name(request, n)  # noqa: E731
        raw = get("sampling_parameters")
        params = sampling_from_json(decode_texts(raw.as_numpy().reshape(-1, 1), "sampling_parameters")[0] if raw is not None else None)
        stream = bool(get("stream").as_numpy().reshape(-1)[0]) if get("stream") is not None else False
        exclude = get("exclude_input_in_output")
        exclude = bool(exclude.as_numpy().reshape(-1)[0]) if exclude is not None else False
        params.setdefault("temperature", 0.0)
        interval = stream_interval(request.parameters())
        if interval:
            params["stream_interval"] = interval
        check_prompt_bytes(text, self.longest_token, self.max_model_len)
        check_request_size(len(self.tokenizer(text)["input_ids"]), params.get("max_tokens", 16), self.max_model_len)
        return text, params, stream, exclude

    def _response(self, prompt, token_ids, completion_text, exclude_prompt=False):
        if self.token_mode:
            ids = np.array(token_ids, dtype=np.int32).reshape(1, 1, -1)
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("output_ids", ids),
                pb_utils.Tensor("sequence_length", np.array([[ids.shape[-1]]], dtype=np.int32)),
            ])
        text = completion_text if exclude_prompt else prompt + completion_text
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_)),
        ])

    def finalize(self):
        async def stop():
            for request_id in list(self.active):
                await self.engine.abort(request_id)
            self.engine.shutdown()

        try:
            self.submit(stop()).result(timeout=30)
        finally:
            self.outbox.close()
            self._stop_loop()

    def _stop_loop(self):
        """Stop the engine's event-loop thread, then let the metrics go (the last step of finalize(),
        or of an initialize() that failed)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self._release_metrics()

    def _release_metrics(self):
        """Let go of the custom metrics while the stub can still tell the server. One that lives
        until the interpreter exits is cleared after the stub's shared memory is gone, and the
        stub dies with SIGSEGV at every unload and shutdown (``Metric::Clear`` in
        ``~MetricFamily``; triton-inference-server/server#8662, still open). The engine's stat
        logger reads its two gauges from ``self.gauges``; what else the stopped loop still
        references is collected."""
        self.gauges.clear()
        self.engine = self.running = self.cancelled = None
        self.metric_families.clear()
        gc.collect()
