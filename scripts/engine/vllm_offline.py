"""vLLM's offline ``LLM.generate``, greedy, in one place: ``run.py`` (the reference) and
``scripts.bench.triton`` (the throughput baseline) both call :func:`generate`.

The engine is created from the engine directory's ``engine_config.json`` (dtype, ``max_model_len``,
seed ...), so both callers run the very engine that Triton's ``vllm_engine`` model runs. Only the
``generate`` call is timed: creating the engine (loading weights, sizing the KV cache) and the
optional warm-up are outside ``generate_s``.

vLLM must be created under a ``__main__`` guard or in a child process; both callers do that. Its
processes start as the engine config's ``start_method`` says, as Triton's engines do: on the CPU a
fork saves the two fresh interpreters of a spawn (``run.py`` took 24 s instead of 10 on two cores).
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from scripts.engine.config import (VLLM_OWN_DEFAULTS, check_start_method, vllm_engine_args_class, vllm_engine_kwargs,
                                   vllm_environment)


@contextmanager
def llm_start_method(start_method: str) -> Iterator[None]:
    """While one ``vllm.LLM`` is made, its processes start with ``start_method``.

    ``LLM.__init__`` builds its ``EngineArgs`` itself and takes no class for them
    (``vllm/entrypoints/llm.py`` at 0.32.0, ``engine_args = EngineArgs(...)``). For a fork, that
    module's ``EngineArgs`` is, for the duration, the subclass Triton's engine model uses
    (:func:`scripts.engine.config.vllm_engine_args_class`). A spawn changes nothing.
    """
    if check_start_method(start_method) in ("spawn", "auto"):
        yield
        return
    import vllm.entrypoints.llm as llm_module  # noqa: PLC0415

    original = llm_module.EngineArgs
    llm_module.EngineArgs = vllm_engine_args_class(start_method, offline=True)
    try:
        yield
    finally:
        llm_module.EngineArgs = original


@dataclass
class OfflineRun:
    """What one offline run gave: vLLM's ``RequestOutput`` list, in prompt order, and its time."""

    outputs: list[Any]
    generate_s: float

    @property
    def generated_tokens(self) -> int:
        return sum(len(o.outputs[0].token_ids) for o in self.outputs)


def generate(config: dict[str, Any], prompts: Sequence[str], max_tokens: int, *, ignore_eos: bool = False,
             warmup_prompts: int = 0, one_at_a_time: bool = False,
             clock: Callable[[], float] = time.perf_counter) -> OfflineRun:
    """Greedy generation of ``max_tokens`` new tokens per prompt with a fresh ``vllm.LLM``.

    ``warmup_prompts``: run that many of the prompts once before the timed call (first-call
    overheads stay out of the measurement). ``ignore_eos``: never stop early (benchmarks).
    ``one_at_a_time``: one ``generate`` call per prompt, as a client sending them one by one gets them
    (bf16 on a GPU rounds differently in another batch, and greedy text can follow).
    """
    os.environ.update(vllm_environment(config))
    from vllm import LLM, SamplingParams  # noqa: PLC0415 - after the environment above

    with llm_start_method(config.get("start_method", VLLM_OWN_DEFAULTS["start_method"])):
        llm = LLM(**vllm_engine_kwargs(config))
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    prompts = list(prompts)
    if warmup_prompts:
        llm.generate(prompts[:warmup_prompts], params, use_tqdm=False)
    start = clock()
    if one_at_a_time:
        outputs = [out for prompt in prompts for out in llm.generate([prompt], params, use_tqdm=False)]
    else:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    return OfflineRun(outputs=list(outputs), generate_s=clock() - start)
