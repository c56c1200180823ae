"""Triton Python model: detokenizer (token ids -> text), the ensemble's last step."""
import json

import triton_python_backend_utils as pb_utils

from scripts.model.tokenizer import load_tokenizer
from scripts.triton.backend.request_handling import is_true, log_initialized, model_parameter, postprocess


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tokenizer = load_tokenizer(model_parameter(config, "tokenizer_dir"))  # no torch: scripts.model.tokenizer
        self.skip_special = is_true(model_parameter(config, "skip_special_tokens", "true"))
        log_initialized(args["model_name"])  # a load that stalls after this line is the server's (scripts/triton/crashes.py)

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
            text = postprocess(self.tokenizer, tokens, lengths, self.skip_special)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", text)]))
        return responses
