"""Where Triton runs an engine's model instances, and whether it loads them in parallel: facts of the
engine's Triton backend, derived from the profile's ``engine``.

* **tensorrt_llm** (backend ``tensorrtllm``, C++): each instance creates its ``executor::Executor`` inside
  the ``tritonserver`` process itself (tensorrtllm_backend@v0.17.0
  ``inflight_batcher_llm/src/model_instance_state.cc``: the executor is made in-process; only with
  ``TRTLLM_ORCHESTRATOR=1`` does it spawn worker processes, which this project never sets). The backend
  declares no ``TRITONBACKEND_GetBackendAttribute`` (``inflight_batcher_llm/src/libtensorrtllm.cc``), so
  Triton loads the instances one after another.
* **vllm**, **transformers** (Python-based backends): one ``triton_python_backend_stub`` process per
  instance; python_backend@r25.02 ``src/python_be.cc`` (``TRITONBACKEND_GetBackendAttribute``) declares
  ``TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(..., true)``, so they load in parallel.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Where the instances run: inside the server's own process, or one stub process each.
IN_SERVER, IN_STUBS = "tritonserver", "stub"


@dataclass(frozen=True)
class EngineBackend:
    engine: str
    backend: str             # the engine model's ``backend:`` in config.pbtxt
    instances_in: str        # IN_SERVER or IN_STUBS
    parallel_loading: bool   # Triton starts the instances together

    def gpu_processes(self, instance_count: int) -> int:
        """How many processes hold the GPU memory of ``instance_count`` instances."""
        return 1 if self.instances_in == IN_SERVER else int(instance_count)


ENGINE_BACKENDS = {
    "tensorrt_llm": EngineBackend("tensorrt_llm", "tensorrtllm", IN_SERVER, parallel_loading=False),
    "vllm": EngineBackend("vllm", "vllm", IN_STUBS, parallel_loading=True),
    "transformers": EngineBackend("transformers", "transformers", IN_STUBS, parallel_loading=True),
}


def engine_backend(engine: str) -> EngineBackend:
    """The facts of ``engine``'s Triton backend (a profile's ``engine``)."""
    try:
        return ENGINE_BACKENDS[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(ENGINE_BACKENDS)}") from None
