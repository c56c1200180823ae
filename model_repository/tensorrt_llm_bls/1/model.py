"""Triton Python model (BLS): preprocessing -> engine -> postprocessing called from Python.

The alternative to the ensemble when the pipeline needs logic between steps. Decoupled, it
streams: each engine response is detokenized and sent on as it arrives. Otherwise the engine's
responses are gathered into one answer.

The engine is always called with ``exec(decoupled=True)``: the Python backend refuses a plain
``exec()`` on a decoupled model ("Please use 'decoupled=True' argument to the 'exec' or
'async_exec' calls for decoupled models", triton-inference-server/python_backend@r25.02:
src/request_executor.cc), while ``exec(decoupled=True)`` serves both kinds, as an iterator of
responses whose last one may be empty (python_backend@r25.02: README.md, "Using BLS with
Decoupled Models"; src/pb_stub.cc binds ``exec``/``async_exec`` with their ``decoupled`` argument).
"""
import json

import numpy as np
import triton_python_backend_utils as pb_utils

from scripts.triton.backend.request_handling import ENGINE_OUTPUTS, gather_engine_outputs, log_initialized, model_parameter

PRE_INPUTS = {"text_input": "QUERY", "max_tokens": "REQUEST_OUTPUT_LEN", "bad_words": "BAD_WORDS_DICT",
              "stop_words": "STOP_WORDS_DICT", "end_id": "END_ID", "pad_id": "PAD_ID"}
PRE_OUTPUTS = {"INPUT_ID": "input_ids", "REQUEST_INPUT_LEN": "input_lengths", "REQUEST_OUTPUT_LEN": "request_output_len",
               "BAD_WORDS_IDS": "bad_words_list", "STOP_WORDS_IDS": "stop_words_list", "OUT_END_ID": "end_id",
               "OUT_PAD_ID": "pad_id"}
PASS_THROUGH = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "temperature": "temperature", "stream": "streaming"}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.engine = model_parameter(config, "tensorrt_llm_model_name")
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        log_initialized(args["model_name"])  # a load that stalls after this line is the server's (scripts/triton/crashes.py)

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self._serve(request, request.get_response_sender())
            return None
        return [self._serve(request, None) for request in requests]

    def _serve(self, request, sender):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            pre = self._call("preprocessing", [
                pb_utils.Tensor(PRE_INPUTS[n], t.as_numpy()) for n in PRE_INPUTS
                if (t := pb_utils.get_input_tensor_by_name(request, n)) is not None], list(PRE_OUTPUTS))
            engine_inputs = [pb_utils.Tensor(PRE_OUTPUTS[n], pb_utils.get_output_tensor_by_name(pre, n).as_numpy())
                             for n in PRE_OUTPUTS]
            engine_inputs += [pb_utils.Tensor(PASS_THROUGH[n], t.as_numpy()) for n in PASS_THROUGH
                              if (t := pb_utils.get_input_tensor_by_name(request, n)) is not None]
            stream = self.decoupled and self._flag(request, "stream")
            engine_request = pb_utils.InferenceRequest(model_name=self.engine, inputs=engine_inputs,
                                                       requested_output_names=list(ENGINE_OUTPUTS))
            parts = []
            for result in engine_request.exec(decoupled=True):
                if result.has_error():
                    raise pb_utils.TritonModelException(result.error().message())
                if not result.output_tensors():  # the final, empty response of a decoupled model
                    continue
                part = tuple(pb_utils.get_output_tensor_by_name(result, n).as_numpy() for n in ENGINE_OUTPUTS)
                if stream:
                    sender.send(self._detokenize(*part))
                else:
                    parts.append(part)
            if not stream:
                if not parts:
                    raise pb_utils.TritonModelException(f"engine model {self.engine!r} answered without tokens")
                response = self._detokenize(*gather_engine_outputs(parts))
                if sender is None:
                    return response
                sender.send(response)
            if sender is not None:
                sender.send(flags=final)
        except pb_utils.TritonModelException as exc:
            error = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
                str(exc), pb_utils.TritonError.INVALID_ARG))
            if sender is None:
                return error
            sender.send(error, flags=final)

    def _call(self, model, inputs, outputs):
        result = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs).exec()
        if result.has_error():
            raise pb_utils.TritonModelException(result.error().message())
        return result

    def _detokenize(self, output_ids, sequence_length):
        post = self._call("postprocessing", [pb_utils.Tensor("TOKENS_BATCH", output_ids),
                                             pb_utils.Tensor("SEQUENCE_LENGTH", sequence_length)], ["OUTPUT"])
        text = pb_utils.get_output_tensor_by_name(post, "OUTPUT").as_numpy()
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", np.asarray(text, dtype=np.object_))])

    @staticmethod
    def _flag(request, name):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return bool(tensor.as_numpy().reshape(-1)[0]) if tensor is not None else False
