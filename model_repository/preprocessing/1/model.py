"""Triton Python model: tokenizer (text -> token ids), the ensemble's first step."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils

from scripts.model.tokenizer import load_tokenizer
from scripts.triton.backend.request_handling import Preprocessor, is_true, log_initialized, model_parameter

INPUTS = ("QUERY", "REQUEST_OUTPUT_LEN", "BAD_WORDS_DICT", "STOP_WORDS_DICT", "END_ID", "PAD_ID")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        tokenizer = load_tokenizer(model_parameter(config, "tokenizer_dir"))  # no torch: scripts.model.tokenizer
        # max_model_len: prompt + output (a TensorRT-LLM engine's max_seq_len); max_input_len: the prompt
        # alone (TensorRT-LLM engines only). Both come from the engine config when the repository is filled.
        self.preprocess = Preprocessor(tokenizer, is_true(model_parameter(config, "add_special_tokens", "true")),
                                       int(model_parameter(config, "max_model_len", "0")),
                                       int(model_parameter(config, "max_input_len", "0")))
        log_initialized(args["model_name"])  # a load that stalls after this line is the server's (scripts/triton/crashes.py)

    def execute(self, requests):
        responses = []
        for request in requests:
            arrays = []
            for name in INPUTS:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                arrays.append(tensor.as_numpy() if tensor is not None else None)
            try:
                outputs = self.preprocess(*arrays)
            except ValueError as exc:  # the client's mistake: 400, and the server keeps serving
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(k, np.ascontiguousarray(v)) for k, v in outputs.items()]))
        return responses
