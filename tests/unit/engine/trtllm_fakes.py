"""A stand-in for ``tensorrt_llm`` and ``tensorrt_llm.runtime`` (the NGC container's TensorRT-LLM 0.17),
for running ``scripts/engine/run.py``'s GPU path on a machine without it.

The fakes take the arguments that TensorRT-LLM@v0.17.0 takes and refuse what it refuses:

* ``ModelRunnerCpp.from_dir`` / ``ModelRunner.from_dir``: keyword names of
  tensorrt_llm/runtime/model_runner_cpp.py and model_runner.py (``from_dir``), as
  examples/run.py passes them; ``ModelRunnerCpp`` takes ``max_batch_size`` at most the engine's.
* ``generate``: ``ModelRunnerMixin._check_inputs`` (tensorrt_llm/runtime/model_runner.py) raises
  for a batch larger than ``max_batch_size`` and for a prompt longer than the engine's
  ``build_config.max_input_len`` (where the engine's config.json gives one); the result dict holds ``sequence_lengths`` only with
  ``output_sequence_lengths=True``; ``output_ids[b][beam]`` is the prompt, then the new tokens, then
  padding up to the longest sequence.

Decoding is a rule the tests can recompute (:func:`expected_new_tokens`), not a model.
"""
from __future__ import annotations

import json
import types
from pathlib import Path

import torch

# Sampling settings generate() accepts as keyword arguments (SamplingConfig fields in
# TensorRT-LLM@v0.17.0:tensorrt_llm/runtime/generation.py); anything else is a mistake here.
SAMPLING_KWARGS = {"max_new_tokens", "end_id", "pad_id", "temperature", "top_k", "top_p", "num_beams",
                   "length_penalty", "early_stopping", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "random_seed", "output_sequence_lengths", "return_dict",
                   "output_cum_log_probs", "output_log_probs"}


def expected_new_tokens(prompt_ids: list[int], max_new_tokens: int, end_id: int) -> list[int]:
    """The fake's greedy answer: ``len(prompt)`` tokens counting up from the prompt's last id (so
    prompts of different lengths stop at different steps), capped at ``max_new_tokens``; end_id ends it."""
    n = min(len(prompt_ids), max_new_tokens)
    tokens = [1000 + prompt_ids[-1] + j for j in range(n)]
    if n < max_new_tokens and end_id != -1:
        tokens.append(end_id)  # the end token is counted in sequence_lengths but is not an output
    return tokens


def engine_build(engine_dir: str) -> dict:
    return json.loads((Path(engine_dir) / "config.json").read_text())["build_config"]


def engine_max_batch(engine_dir: str) -> int:
    return engine_build(engine_dir)["max_batch_size"]


class _Runner:
    calls: list  # set by make_modules

    def _generate(self, batch_input_ids, kwargs):
        unknown = set(kwargs) - SAMPLING_KWARGS
        if unknown:
            raise TypeError(f"generate() got unexpected keyword arguments {sorted(unknown)}")
        self.calls.append(("generate", type(self).__name__, [ids.tolist() for ids in batch_input_ids], dict(kwargs)))
        batch_size = len(batch_input_ids)
        if batch_size > self.max_batch_size:  # ModelRunnerMixin._check_inputs
            raise RuntimeError(f"Input batch size ({batch_size}) exceeds the engine or specified limit "
                               f"({self.max_batch_size})")
        longest, limit = max(len(ids) for ids in batch_input_ids), engine_build(self.engine_dir).get("max_input_len")
        if limit and longest > limit:
            raise RuntimeError(f"Maximum input length ({longest}) exceeds the engine or specified limit ({limit})")
        end_id, pad_id = kwargs["end_id"], kwargs["pad_id"]
        rows, lengths = [], []
        for ids in batch_input_ids:
            prompt = ids.tolist()
            new = expected_new_tokens(prompt, kwargs["max_new_tokens"], end_id)
            finished = bool(new) and new[-1] == end_id and end_id != -1
            rows.append(prompt + new)
            lengths.append(len(prompt) + len(new) - (1 if finished else 0))
        width = max(len(r) for r in rows)
        output_ids = torch.tensor([[r + [pad_id] * (width - len(r))] for r in rows], dtype=torch.int32)
        out = {"output_ids": output_ids}
        if kwargs.get("output_sequence_lengths", False):
            out["sequence_lengths"] = torch.tensor([[n] for n in lengths], dtype=torch.int32)
        return out if kwargs.get("return_dict", False) else output_ids


def make_modules(python_bindings: bool = True) -> tuple[types.ModuleType, types.ModuleType, list]:
    """``(tensorrt_llm, tensorrt_llm.runtime, calls)``: put both in ``sys.modules``; ``calls``
    records every ``from_dir`` and ``generate`` call in order."""
    calls: list = []

    class ModelRunnerCpp(_Runner):
        @classmethod
        def from_dir(cls, engine_dir, *, lora_dir=None, rank=0, max_batch_size=None, max_input_len=None,
                     max_output_len=None, max_beam_width=None, max_attention_window_size=None,
                     sink_token_length=None, kv_cache_free_gpu_memory_fraction=None, debug_mode=False,
                     lora_ckpt_source="hf", gpu_weights_percent=1, max_tokens_in_paged_kv_cache=None,
                     kv_cache_enable_block_reuse=False, enable_chunked_context=False, is_enc_dec=False):
            engine = engine_max_batch(engine_dir)
            if max_batch_size is not None and max_batch_size > engine:
                raise AssertionError(f"max_batch_size {max_batch_size} is larger than the engine's {engine}")
            calls.append(("from_dir", cls.__name__, {"engine_dir": engine_dir, "rank": rank,
                          "max_batch_size": max_batch_size, "max_input_len": max_input_len,
                          "max_output_len": max_output_len, "max_beam_width": max_beam_width}))
            runner = cls()
            runner.max_batch_size, runner.engine_dir = max_batch_size or engine, engine_dir
            return runner

        def generate(self, batch_input_ids, *, max_new_tokens=1, end_id=None, pad_id=None, return_dict=False,
                     output_sequence_lengths=False, streaming=False, **sampling):
            return self._generate(batch_input_ids, dict(sampling, max_new_tokens=max_new_tokens, end_id=end_id,
                                                        pad_id=pad_id, return_dict=return_dict,
                                                        output_sequence_lengths=output_sequence_lengths))

    class ModelRunner(_Runner):
        @classmethod
        def from_dir(cls, engine_dir, *, lora_dir=None, rank=0, debug_mode=False, lora_ckpt_source="hf",
                     medusa_choices=None, gpu_weights_percent=1):
            calls.append(("from_dir", cls.__name__, {"engine_dir": engine_dir, "rank": rank}))
            runner = cls()
            runner.max_batch_size, runner.engine_dir = engine_max_batch(engine_dir), engine_dir
            return runner

        def generate(self, batch_input_ids, sampling_config=None, streaming=False, **kwargs):
            return self._generate(batch_input_ids, kwargs)

    ModelRunnerCpp.calls = ModelRunner.calls = calls
    runtime = types.ModuleType("tensorrt_llm.runtime")
    runtime.PYTHON_BINDINGS = python_bindings
    runtime.ModelRunner = ModelRunner
    if python_bindings:
        runtime.ModelRunnerCpp = ModelRunnerCpp
    package = types.ModuleType("tensorrt_llm")
    package.__path__ = []  # a package, so `import tensorrt_llm.runtime` finds the submodule in sys.modules
    package.runtime = runtime
    package.mpi_rank = lambda: 0
    return package, runtime, calls
