"""transformers' continuous batching as an engine (the ``gpu-transformers`` profile).

Why it is built this way, and the sources: docs/design/engine.md.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: A request for which the manager produced no output for this long has stalled.
STALL_S = 600.0


class EngineRequestError(ValueError):
    """A request this engine cannot serve; the message says what to change."""


def device_for(config: dict[str, Any], instance_device: str | None = None) -> str:
    """``cuda:N`` or ``cpu``: the engine config's ``device`` (``auto`` picks CUDA when present);
    ``instance_device`` (what Triton gave the model instance) wins when set."""
    if instance_device:
        return instance_device
    wanted = config.get("device", "auto")
    if wanted == "auto":
        import torch  # noqa: PLC0415

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    return wanted


def kv_block_bytes(model_config: Any, page_size: int, dtype_bytes: int) -> int:
    """Bytes of one cache block: K and V of ``page_size`` tokens for every layer."""
    text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * page_size * dtype_bytes


def cb_config_kwargs(config: dict[str, Any], device: str, model_config: Any, dtype_bytes: int) -> dict[str, Any]:
    """``ContinuousBatchingConfig`` keyword arguments for an engine config on ``device``."""
    page_size = int(config.get("page_size", 256))
    kwargs: dict[str, Any] = {
        "page_size": page_size,
        "max_requests_per_batch": int(config["max_num_seqs"]),
        # Prefix sharing reuses cached blocks across requests: a prompt's numbers would then depend on
        # what ran before it, and greedy bf16 text could differ from the reference by order alone.
        "allow_block_sharing": False,
        "seed": int(config.get("seed", 0)),
    }
    if device.startswith("cuda"):
        fraction = float(config["kv_cache_free_gpu_mem_fraction"])
        if not 0 < fraction < 1:
            raise ValueError(f"kv_cache_free_gpu_mem_fraction must be within (0, 1), got {fraction}")
        return kwargs | {"max_memory_percent": fraction}
    space = float(config.get("kv_cache_space_gib", 1)) * 2**30
    blocks = int(space // kv_block_bytes(model_config, page_size, dtype_bytes))
    needed = math.ceil(int(config["max_model_len"]) / page_size)
    if blocks < needed:
        raise ValueError(f"kv_cache_space_gib {config.get('kv_cache_space_gib')} holds {blocks} blocks of {page_size} "
                         f"tokens; one sequence of max_model_len {config['max_model_len']} needs {needed}: raise it")
    return kwargs | {"num_blocks": blocks, "max_batch_tokens": int(config["max_model_len"])}


def refuse_sampling(sampling: dict[str, Any]) -> None:
    """Raise :class:`EngineRequestError` for settings a greedy engine would silently ignore."""
    if float(sampling.get("temperature", 0.0)) > 0:
        raise EngineRequestError("this engine (transformers continuous batching) decodes greedily: send temperature 0 "
                                 "(its sampling switch and seed are per engine, not per request)")
    unsupported = sorted(k for k in ("top_k", "top_p", "seed", "logit_bias", "repetition_penalty",
                                     "presence_penalty", "frequency_penalty") if k in sampling)
    if unsupported:
        what = "bad_words" if unsupported == ["logit_bias"] else ", ".join(unsupported)
        raise EngineRequestError(f"this engine (transformers continuous batching) does not support {what}: leave it out")


def stop_position(tokenizer: Any, ids: Sequence[int], stops: Sequence[str], checked: int = 0) -> int | None:
    """The number of ids up to and including the token that completes the first stop string.
    ``checked``: prefixes up to that many ids were looked at before (a stream checks its new tokens only)."""
    if not stops:
        return None
    for n in range(max(checked, 0) + 1, len(ids) + 1):
        text = tokenizer.decode(list(ids[:n]), skip_special_tokens=True)
        if any(s in text for s in stops):
            return n
    return None


class Engine:
    """A model and its continuous-batching manager, started; :meth:`stop` ends its thread."""

    def __init__(self, config: dict[str, Any], instance_device: str | None = None):
        import torch  # noqa: PLC0415 - heavy
        from transformers import AutoModelForCausalLM, GenerationConfig  # noqa: PLC0415
        from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: PLC0415

        from scripts.model.hf_dtype import dtype_kwargs  # noqa: PLC0415

        self.config = config
        self.device = device_for(config, instance_device)
        dtype = getattr(torch, config["dtype"])
        start = time.monotonic()
        self.model = AutoModelForCausalLM.from_pretrained(config["model_dir"], **dtype_kwargs(dtype),
                                                          attn_implementation="sdpa").to(self.device)
        self.load_s = time.monotonic() - start
        eos = self.model.generation_config.eos_token_id
        self.eos_token_id = eos if eos is not None else self.model.config.eos_token_id
        generation = GenerationConfig(do_sample=False, max_new_tokens=16, eos_token_id=self.eos_token_id,
                                      pad_token_id=self.model.config.pad_token_id)
        cb = ContinuousBatchingConfig(**cb_config_kwargs(config, self.device, self.model.config,
                                                         torch.tensor([], dtype=dtype).element_size()))
        self.manager = self.model.init_continuous_batching(generation_config=generation, continuous_batching_config=cb)
        self.manager.start()

    def add(self, prompt_ids: Sequence[int], max_new_tokens: int, *, ignore_eos: bool = False,
            stop_token_ids: Sequence[int] = (), request_id: str | None = None) -> str:
        """Queue one request (outputs stream: each carries all tokens so far); returns its id."""
        eos: int | list[int] = -1 if ignore_eos else [self.eos_token_id, *stop_token_ids] if stop_token_ids else self.eos_token_id
        rid = self.manager.add_request(list(prompt_ids), request_id=request_id, max_new_tokens=int(max_new_tokens),
                                       streaming=True, eos_token_id=eos)
        if rid is None:
            raise RuntimeError("the continuous-batching manager refused the request: it is stopping or has failed")
        return rid

    def cancel(self, request_id: str) -> None:
        """End a request early. The manager frees a cancelled request without delivering an output
        (transformers 5.19, ``ContinuousBatchProcessor.prepare_next_batch``: ``clear_cancelled_requests``),
        so a handler registered for it would stay forever: it is dropped here."""
        self.manager.cancel_request(request_id)
        router = self.manager.output_router
        with router._lock:
            router.result_handlers.pop(request_id, None)

    def wait(self, request_id: str, timeout_s: float = STALL_S) -> Any:
        """Block until ``request_id`` finishes (only for callers that registered no handler)."""
        deadline = time.monotonic() + timeout_s
        for out in self.manager.request_id_iter(request_id):
            if out.is_finished():
                return out
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"request {request_id} did not finish within {timeout_s:.0f} s")

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, ignore_eos: bool = False,
                 one_at_a_time: bool = False) -> list[Any]:
        """Greedy outputs (``GenerationOutput``) in prompt order. ``one_at_a_time`` sends each prompt
        after the previous one finished, as a client sending requests in turn does."""
        if one_at_a_time:
            return [self.wait(self.add(p, max_new_tokens, ignore_eos=ignore_eos)) for p in prompts]
        ids = [self.add(p, max_new_tokens, ignore_eos=ignore_eos) for p in prompts]
        done: dict[str, Any] = {}
        deadline = time.monotonic() + STALL_S
        while len(done) < len(ids) and time.monotonic() < deadline:
            out = self.manager.get_result(timeout=1.0)
            if out is not None and out.is_finished():
                done[out.request_id] = out
        missing = [i for i in ids if i not in done]
        if missing:
            raise RuntimeError(f"{len(missing)} requests did not finish within {STALL_S:.0f} s")
        return [done[i] for i in ids]

    def stop(self) -> None:
        self.manager.stop(block=True, timeout=30)
        self.manager.destroy()


@dataclass
class OfflineRun:
    """One offline run: outputs in prompt order, the time of the generation alone, load time."""

    outputs: list[Any]
    generate_s: float
    load_s: float

    @property
    def generated_tokens(self) -> int:
        return sum(len(o.generated_tokens) for o in self.outputs)


def generate(config: dict[str, Any], prompts: Sequence[Sequence[int]], max_new_tokens: int, *, ignore_eos: bool = False,
             one_at_a_time: bool = False, warmup_prompts: int = 0,
             clock: Callable[[], float] = time.perf_counter) -> OfflineRun:
    """A fresh engine, an optional warm-up on the first prompts, then the timed generation."""
    engine = Engine(config)
    try:
        if warmup_prompts:
            engine.generate(prompts[:warmup_prompts], max_new_tokens, ignore_eos=ignore_eos)
        start = clock()
        outputs = engine.generate(prompts, max_new_tokens, ignore_eos=ignore_eos, one_at_a_time=one_at_a_time)
        return OfflineRun(outputs=outputs, generate_s=clock() - start, load_s=engine.load_s)
    finally:
        engine.stop()
