"""Fill the Triton model-repository templates for a profile (notebook 02)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scripts.engine.config import VLLM_OWN_DEFAULTS, read_engine_config, vllm_engine_kwargs
from scripts.triton.repository.fill_template import CONFIG, fill_repository
from scripts.paths import TEMPLATE_DIR, triton_repo_dir
from scripts.profiles import Profile
from scripts.triton.backend.request_handling import is_true

COMMON_MODELS = ("preprocessing", "postprocessing", "ensemble", "tensorrt_llm_bls")
ENGINE_MODEL = {"vllm": "vllm_engine", "tensorrt_llm": "tensorrt_llm", "transformers": "transformers_engine"}


@dataclass(frozen=True)
class RepoSettings:
    """The knobs of the filled repository (defaults: the TensorRT-LLM guide's walk-through values)."""

    triton_max_batch_size: int = 4
    decoupled_mode: bool = False
    max_queue_delay_microseconds: int = 10000
    max_queue_size: int = 0
    preprocessing_instance_count: int = 1
    postprocessing_instance_count: int = 1
    engine_instance_count: int = 1
    bls_instance_count: int = 1
    # the engine model's instances: KIND_GPU or KIND_CPU; None takes it from the engine config (instance_kind;
    # else KIND_CPU for vLLM and for a transformers engine on device "cpu", else KIND_GPU)
    engine_instance_kind: str | None = None
    # tensorrt_llm parameters, as the v0.17.0 backend reads them (model_repository/tensorrt_llm/config.pbtxt):
    batching_strategy: str = "inflight_fused_batching"  # -> gpt_model_type
    batch_scheduler_policy: str = "guaranteed_no_evict"
    kv_cache_free_gpu_mem_fraction: float = 0.9
    add_special_tokens: bool = True
    skip_special_tokens: bool = True

    @classmethod
    def for_profile(cls, profile: Profile, **overrides: Any) -> "RepoSettings":
        """The defaults, with the profile's ``triton_max_batch_size`` where it sets one (gpu-trtllm)."""
        batch = profile.get("triton_max_batch_size")
        return cls(**({"triton_max_batch_size": int(batch)} if batch is not None else {}) | overrides)


def repo_dir(profile: Profile) -> Path:
    return triton_repo_dir(profile.name)


def length_limits(engine_config: dict[str, Any]) -> tuple[int, int]:
    """``(max_model_len, max_input_len)`` the preprocessing model checks requests against.

    vLLM has one limit, ``max_model_len``, on prompt plus output. A TensorRT-LLM engine has two, fixed
    by ``trtllm-build``: ``max_seq_len`` (prompt plus output) and ``max_input_len`` (the prompt).
    0 means no limit.
    """
    if engine_config["engine"] == "tensorrt_llm":
        total = engine_config.get("max_seq_len") or engine_config["max_model_len"]
        return int(total), int(engine_config.get("max_input_len") or 0)
    return int(engine_config["max_model_len"]), 0


def template_values(engine_config: dict[str, Any], s: RepoSettings, engine_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The values each template model is filled with. ``engine_dir``: the directory the engine config was read
    from, which the engine model is pointed at (a TensorRT-LLM config names its own ``engine_dir``, which wins)."""
    engine = ENGINE_MODEL[engine_config["engine"]]
    tokenizer = engine_config.get("tokenizer_dir", engine_config["model_dir"])
    engine_dir = engine_config.get("engine_dir") or str(engine_dir)
    common = {"triton_max_batch_size": s.triton_max_batch_size}
    max_model_len, max_input_len = length_limits(engine_config)
    values = {
        "preprocessing": common | {"tokenizer_dir": tokenizer, "add_special_tokens": s.add_special_tokens,
                                   "max_model_len": max_model_len, "max_input_len": max_input_len,
                                   "preprocessing_instance_count": s.preprocessing_instance_count},
        "postprocessing": common | {"tokenizer_dir": tokenizer, "skip_special_tokens": s.skip_special_tokens,
                                    "postprocessing_instance_count": s.postprocessing_instance_count},
        "ensemble": common | {"engine_model_name": engine},
        "tensorrt_llm_bls": common | {"engine_model_name": engine, "decoupled_mode": s.decoupled_mode,
                                      "bls_instance_count": s.bls_instance_count},
        engine: common | {"engine_dir": engine_dir, "decoupled_mode": s.decoupled_mode,
                          "max_queue_delay_microseconds": s.max_queue_delay_microseconds,
                          "engine_instance_count": s.engine_instance_count},
    }
    if engine == "tensorrt_llm":
        values[engine] |= {"max_queue_size": s.max_queue_size, "batching_strategy": s.batching_strategy,
                           "batch_scheduler_policy": s.batch_scheduler_policy,
                           "kv_cache_free_gpu_mem_fraction": s.kv_cache_free_gpu_mem_fraction}
    elif engine == "transformers_engine":
        values[engine]["engine_instance_kind"] = instance_kind(engine_config, s)
    else:
        kind = instance_kind(engine_config, s)
        values[engine]["engine_instance_kind"] = kind
        values["vllm_model"] = {"engine_instance_count": s.engine_instance_count, "engine_instance_kind": kind}
    return values


def instance_kind(engine_config: dict[str, Any], s: RepoSettings) -> str:
    """The engine instances' kind: the settings', else the engine config's ``instance_kind`` (gpu-vllm), else
    KIND_CPU for a vLLM engine without one (cpu) or a transformers engine on ``device: cpu``, else KIND_GPU."""
    on_cpu = engine_config.get("device") == "cpu" or engine_config["engine"] == "vllm"
    kind = s.engine_instance_kind or engine_config.get("instance_kind") or ("KIND_CPU" if on_cpu else "KIND_GPU")
    if kind not in ("KIND_GPU", "KIND_CPU"):
        raise ValueError(f"engine_instance_kind must be KIND_GPU or KIND_CPU, got {kind!r}")
    return kind


def standalone_arguments(engine_config: dict[str, Any], checkpoint: str | Path | None = None) -> dict[str, Any]:
    """The standalone model's ``model.json``: its engine arguments, as the official vLLM backend reads
    them, plus our own settings (``VLLM_OWN_KEYS``); ``checkpoint`` replaces the engine's model and tokenizer
    (and caps ``max_model_len`` at its context length)."""
    kwargs = vllm_engine_kwargs(engine_config) | {k: engine_config.get(k, default) for k, default in VLLM_OWN_DEFAULTS.items()}
    if not checkpoint:
        return kwargs
    # another checkpoint may have a shorter context than the engine's (notebook 08's second version on a
    # GPU profile): vLLM refuses a max_model_len above the model's max_position_embeddings
    config_json = Path(checkpoint) / "config.json"
    context = json.loads(config_json.read_text()).get("max_position_embeddings") if config_json.is_file() else None
    limit = min(kwargs["max_model_len"], int(context)) if context else kwargs["max_model_len"]
    return kwargs | {"model": str(checkpoint), "tokenizer": str(checkpoint), "max_model_len": limit}


def fill_for_profile(profile: Profile, settings: RepoSettings | None = None, output_dir: Path | None = None,
                     engine_dir: Path | None = None, models: list[str] | None = None) -> dict[str, Any]:
    """Fill the profile's models into ``build/triton_repo/<profile>``; returns what was written.
    ``settings``: None gives :meth:`RepoSettings.for_profile`; ``engine_dir`` replaces the profile's
    engine directory; ``models`` fills only those models."""
    settings = settings or RepoSettings.for_profile(profile)
    engine_dir = engine_dir or profile.path("engine_dir")
    engine_config = read_engine_config(engine_dir)
    values = template_values(engine_config, settings, engine_dir)
    models = list(values) if models is None else list(models)
    output_dir = output_dir or repo_dir(profile)
    output_dir.mkdir(parents=True, exist_ok=True)
    extra = {"vllm_model": {"1/model.json": json.dumps(standalone_arguments(engine_config), indent=2) + "\n"}}
    written = fill_repository(TEMPLATE_DIR, output_dir, {m: values[m] for m in models if m in values}, models=models,
                              extra_files={m: files for m, files in extra.items() if m in models})
    return {"repository": str(output_dir), "models": sorted(p.name for p in written), "settings": asdict(settings)}


def tree(path: Path) -> str:
    """A text tree of a repository (files and folders, sorted), for display."""
    path = Path(path)
    lines = [path.name + "/"]

    def walk(d: Path, prefix: str):
        entries = sorted(p for p in d.iterdir() if p.name not in ("__pycache__", ".gitkeep"))
        for i, p in enumerate(entries):
            last = i == len(entries) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{p.name}{'/' if p.is_dir() else ''}")
            if p.is_dir():
                walk(p, prefix + ("    " if last else "│   "))

    walk(path, "")
    return "\n".join(lines)


@dataclass(frozen=True)
class RepositoryFacts:
    """What a client of the filled ensemble needs to know, read from the repository itself."""

    tokenizer_dir: str
    max_model_len: int
    engine_model: str
    decoupled: bool
    skip_special_tokens: bool = True  # how postprocessing decodes; a streaming client decodes the same way
    max_input_len: int = 0  # the longest prompt (a TensorRT-LLM engine's build limit); 0: none beside max_model_len


def read_model_config(repo: Path, model: str):
    """``<repo>/<model>/config.pbtxt`` parsed into Triton's ``ModelConfig`` protobuf."""
    from google.protobuf import text_format  # noqa: PLC0415
    from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

    path = Path(repo) / model / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: fill the repository first (notebook 02)")
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(path.read_text(), config)
    except text_format.ParseError as exc:
        raise ValueError(f"{path} does not parse ({exc}): run scripts.triton.repository.lint on it") from None
    return config


def repository_facts(repo: Path, ensemble: str = "ensemble") -> RepositoryFacts:
    """Tokenizer, length limit and streaming ability of an ensemble, from its filled configs."""
    config = read_model_config(repo, ensemble)
    steps = [s.model_name for s in config.ensemble_scheduling.step]
    engines = [s for s in steps if s not in ("preprocessing", "postprocessing")]
    if "preprocessing" not in steps or len(engines) != 1:
        raise ValueError(f"{ensemble} in {repo} should run preprocessing, one engine model and postprocessing; its steps are {steps}")
    pre = read_model_config(repo, "preprocessing").parameters
    engine = read_model_config(repo, engines[0])
    post = read_model_config(repo, "postprocessing").parameters if "postprocessing" in steps else {}
    return RepositoryFacts(tokenizer_dir=pre["tokenizer_dir"].string_value,
                           max_model_len=int(pre["max_model_len"].string_value or 0),
                           engine_model=engines[0], decoupled=engine.model_transaction_policy.decoupled,
                           skip_special_tokens=is_true(post["skip_special_tokens"].string_value
                                                       if "skip_special_tokens" in post else "true"),
                           max_input_len=int(pre["max_input_len"].string_value or 0) if "max_input_len" in pre else 0)
