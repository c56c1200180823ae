"""One Triton per Serve replica, behind one small interface (:class:`TritonLLM`).

Why it is built this way, and the sources: docs/design/triton.md.
"""
from __future__ import annotations

import asyncio
import importlib
import importlib.util
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Protocol

import numpy as np

class TritonRequestError(RuntimeError):
    """Triton refused or failed a request; the message is Triton's."""


class TritonUnavailable(TritonRequestError):
    """No Triton answers at the address (it crashed, is restarting, or was never started): the
    request never reached a model. A replica answers 503, and its health check sees the same."""


#: The ensemble outputs a client reads; ``output_ids`` only where the ensemble declares it
#: (this repository's does; TensorRT-LLM's stock ensemble does not).
CHUNK_OUTPUTS = ("text_output", "sequence_length", "output_ids")


@dataclass
class Chunk:
    text: str
    tokens: int
    ids: list[int] | None = None  # None: the ensemble returns no output_ids


def chunk_from_outputs(text_output: np.ndarray | None, sequence_length: np.ndarray | None,
                       output_ids: np.ndarray | None = None) -> Chunk:
    """A :class:`Chunk` from one response's ``text_output`` ([1, beams]; None from an engine model,
    which answers in token ids), ``sequence_length`` ([1, beams]) and ``output_ids`` ([1, beams,
    tokens]); beam 0 is the answer. Without ``sequence_length``, the ids are counted."""
    first = np.asarray(text_output).reshape(-1)[0] if text_output is not None and np.asarray(text_output).size else b""
    text = first.decode("utf-8", errors="replace") if isinstance(first, bytes) else str(first)
    tokens = int(np.asarray(sequence_length).reshape(-1)[0]) if sequence_length is not None and np.asarray(sequence_length).size else 0
    ids = None
    if output_ids is not None:
        beams = np.asarray(output_ids)
        ids = beams.reshape(-1, beams.shape[-1])[0].tolist() if beams.size else []
        ids = ids[:tokens] if sequence_length is not None else ids
        tokens = tokens if sequence_length is not None or text_output is not None else len(ids)
    return Chunk(text, tokens, ids)


def model_outputs(model_repository: str | Path, model_name: str = "ensemble") -> tuple[str, ...]:
    """Those of :data:`CHUNK_OUTPUTS` that the filled model declares (asking for an undeclared
    output fails the request): a text-out ensemble's, or an engine model's token ids."""
    from scripts.triton.repository.fill import read_model_config  # noqa: PLC0415

    declared = {output.name for output in read_model_config(Path(model_repository), model_name).output}
    if "text_output" not in declared and "output_ids" not in declared:
        raise ValueError(f"{model_name} in {model_repository} has neither text_output nor output_ids: it is not a "
                         "text-out ensemble or an engine model")
    return tuple(name for name in CHUNK_OUTPUTS if name in declared)


class TritonLLM(Protocol):
    mode: str

    async def ready(self) -> bool: ...

    def generate(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any] | None = None) -> AsyncIterator[Chunk]: ...

    def info(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...


def in_process_available() -> bool:
    """Whether the real in-process ``tritonserver`` module is importable (not PyPI's placeholder)."""
    if importlib.util.find_spec("tritonserver") is None:
        return False
    try:
        return hasattr(importlib.import_module("tritonserver"), "Server")
    except Exception:  # the placeholder raises on import
        return False


def text_array(tensor) -> np.ndarray:
    """A BYTES output of the in-process API as a NumPy array of ``str``, decoded as UTF-8.

    Not ``Tensor.to_string_array()``: in r25.02 that is ``to_bytes_array().astype(str)``
    (triton-inference-server/core@r25.02:python/tritonserver/_api/_tensor.py), and NumPy decodes
    ``bytes`` to ``str`` as ASCII, so any non-ASCII text raises UnicodeDecodeError. A sequence that
    is not valid UTF-8 (a character cut between two streamed responses) decodes with U+FFFD.
    """
    raw = np.asarray(tensor.to_bytes_array())
    out = np.empty(raw.shape, dtype=object)
    for index, item in np.ndenumerate(raw):
        out[index] = item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
    return out


class InProcessTriton:
    """Triton embedded in this process through the ``tritonserver`` Python API (NGC containers)."""

    mode = "in-process"

    def __init__(self, model_repository: str | Path, model_name: str = "ensemble"):
        import tritonserver  # noqa: PLC0415 - only inside NGC containers

        self._tritonserver = tritonserver
        self.model_repository, self.model_name = str(model_repository), model_name
        self.server = tritonserver.Server(model_repository=self.model_repository,
                                          model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
                                          log_info=False)
        self.server.start(wait_until_ready=True)
        self.model = self.server.load(model_name)

    async def ready(self) -> bool:
        return bool(self.server.ready() and self.model.ready())

    async def generate(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any] | None = None) -> AsyncIterator[Chunk]:
        # Model.async_infer takes InferenceRequest's fields as keywords (triton-inference-server/core@r25.02:
        # python/tritonserver/_api/_model.py), parameters among them
        async for response in self.model.async_infer(inputs=inputs, parameters=parameters or {}):
            if response.error is not None:
                raise TritonRequestError(str(response.error))
            outputs = response.outputs or {}
            if "text_output" in outputs or "output_ids" in outputs:
                length, ids = (np.from_dlpack(outputs[n]) if n in outputs else None for n in CHUNK_OUTPUTS[1:])
                text = text_array(outputs["text_output"]) if "text_output" in outputs else None
                yield chunk_from_outputs(text, length, ids)

    def info(self) -> dict[str, Any]:
        return {"mode": self.mode, "model": self.model_name, "model_repository": self.model_repository}

    def stop(self) -> None:
        self.server.stop()


class GrpcModel:
    """A model of a running Triton (the ensemble, or an engine model), called through
    ``tritonclient``'s asyncio gRPC client; one channel per instance, reused by every request."""

    def __init__(self, grpc_url: str, model_name: str = "ensemble", outputs: tuple[str, ...] = CHUNK_OUTPUTS[:2]):
        self.grpc_url, self.model_name, self.outputs = grpc_url, model_name, outputs
        self._client = None

    def client(self):
        # grpc.aio binds a channel to the event loop that creates it: make it on the caller's loop.
        if self._client is None:
            import tritonclient.grpc.aio as grpcclient  # noqa: PLC0415

            self._client = grpcclient.InferenceServerClient(self.grpc_url)
        return self._client

    async def ready(self) -> bool:
        try:
            return bool(await self.client().is_model_ready(self.model_name))
        except Exception:
            return False

    async def generate(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any] | None = None) -> AsyncIterator[Chunk]:
        """The responses of one request; ``parameters``: Triton request parameters (``{name: value}``)."""
        import grpc  # noqa: PLC0415
        import tritonclient.grpc.aio as grpcclient  # noqa: PLC0415
        from tritonclient.utils import np_to_triton_dtype  # noqa: PLC0415

        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        request = {"model_name": self.model_name, "inputs": tensors, "request_id": uuid.uuid4().hex,
                   "outputs": [grpcclient.InferRequestedOutput(name) for name in self.outputs]}
        if parameters:
            request["parameters"] = parameters

        async def one_request():
            yield request

        # The stream ends once the server has sent the request's final response.
        responses = self.client().stream_infer(one_request())
        done = False
        try:
            async for result, error in responses:
                if error is not None:
                    raise TritonRequestError(error.message())
                yield chunk_from_outputs(*(result.as_numpy(name) if name in self.outputs else None
                                           for name in CHUNK_OUTPUTS))
            done = True
        except grpc.aio.AioRpcError as exc:  # the stream itself failed: not Triton's answer to the request
            raise rpc_failed(exc, self.grpc_url) from None
        finally:
            if not done:  # the client went away or failed: Triton cancels the request, vLLM aborts it
                responses.cancel()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def rpc_failed(exc: Any, grpc_url: str) -> TritonRequestError:
    """The request error for a gRPC stream that failed (``grpc.aio.AioRpcError``): :class:`TritonUnavailable`
    when nothing answers at ``grpc_url`` (UNAVAILABLE: connection refused, or the server went away mid-stream)."""
    code = exc.code()
    if code is not None and code.name == "UNAVAILABLE":
        return TritonUnavailable(f"no Triton answers at {grpc_url} ({exc.details()}): it crashed, is restarting or "
                                 "was stopped")
    return TritonRequestError(f"gRPC {code.name if code else 'error'}: {exc.details()}")


class AttachedTriton:
    """A running Triton this process did not start (one Triton shared by several clients): its
    model called through the asyncio gRPC client (:class:`GrpcModel`); never stopped from here."""

    mode = "attached"

    def __init__(self, grpc_url: str, model_repository: str | Path, model_name: str = "ensemble"):
        self.grpc_url, self.model_repository, self.model_name = grpc_url, str(model_repository), model_name
        self.model_client = GrpcModel(grpc_url, model_name, model_outputs(model_repository, model_name))

    async def ready(self) -> bool:
        return await self.model_client.ready()

    def generate(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any] | None = None) -> AsyncIterator[Chunk]:
        return self.model_client.generate(inputs, parameters)

    def info(self) -> dict[str, Any]:
        return {"mode": self.mode, "model": self.model_name, "model_repository": self.model_repository,
                "grpc_url": self.grpc_url}

    def stop(self) -> None:
        """Nothing to stop: the Triton is its owner's."""


class ManagedTriton(AttachedTriton):
    """A ``tritonserver`` process owned by this replica: an :class:`AttachedTriton` that started it."""

    mode = "managed process"

    def __init__(self, model_repository: str | Path, model_name: str = "ensemble", ready_timeout_s: float = 600):
        from scripts.triton.server import TritonServer  # noqa: PLC0415

        # Explicit model control: only the model the replica calls is loaded, with the models an
        # ensemble names (the repository also holds vllm_model, a second engine this replica does not need).
        self.server = TritonServer(model_repository, extra_args=("--model-control-mode=explicit", f"--load-model={model_name}"))
        self.server.start(timeout_s=ready_timeout_s, retries=1)
        super().__init__(self.server.grpc_url, model_repository, model_name)

    async def ready(self) -> bool:
        if self.server.process is None:
            return False
        if self.server.process.poll() is not None:
            # Triton crashed. Its stubs exit with it; the vLLM engine processes they started do not,
            # and hold their memory until stopped: stop the rest of the group now, not when Serve
            # gets round to replacing this replica.
            if self.server.group_alive():
                await asyncio.to_thread(self.server.stop)
            return False
        return await super().ready()

    def info(self) -> dict[str, Any]:
        return {"mode": self.mode, "model": self.model_name, "model_repository": str(self.server.command.model_repo),
                "http_url": self.server.http_url, "grpc_url": self.server.grpc_url, "metrics_url": self.server.metrics_url,
                "pid": self.server.pid, "shm_prefix": self.server.command.shm_prefix, "log": str(self.server.log_path)}

    def stop(self) -> None:
        self.server.stop()


#: The ways :func:`make_backend` owns (or reaches) Triton.
TRITON_MODES = ("auto", "in-process", "managed", "attached")


def resolve_mode(mode: str) -> str:
    """The mode :func:`make_backend` runs for ``mode``: ``auto`` is ``in-process`` where the ``tritonserver``
    module imports (the NGC containers install its wheel: server@r25.02 ``build.py``), else ``managed``."""
    if mode not in TRITON_MODES:
        raise ValueError(f"mode must be auto, in-process, managed or attached, got {mode!r}")
    if mode == "auto":
        return "in-process" if in_process_available() else "managed"
    return mode


def own_process_mode(mode: str, why: str) -> str:
    """``mode`` resolved, where it gives each replica a ``tritonserver`` process of its own (``managed``: a PID,
    ports, a shared-memory prefix); any other refused with ``why`` (what needs the process) and the fix."""
    resolved = resolve_mode(mode)
    if resolved != "managed":
        where = " (auto, where the tritonserver module imports)" if mode == "auto" else ""
        raise ValueError(f"TRITON_MODE={mode!r} runs Triton {resolved}{where}, but {why}: use TRITON_MODE='managed'")
    return resolved


def make_backend(model_repository: str | Path, model_name: str = "ensemble", mode: str = "auto",
                 ready_timeout_s: float = 600, triton_url: str | None = None) -> TritonLLM:
    """``mode``: ``auto`` (in-process where ``tritonserver`` imports, else a managed process),
    ``in-process``, ``managed``, or ``attached`` (a Triton that is already running at the gRPC
    address ``triton_url``, shared by every replica; the repository is read for the model's outputs)."""
    repo = Path(model_repository)
    if not (repo / model_name / "config.pbtxt").is_file():
        raise FileNotFoundError(f"{repo} has no model {model_name!r}: fill the repository first (notebook 02, or "
                                "scripts.triton.repository.fill.fill_for_profile)")
    mode = resolve_mode(mode)
    if (mode == "attached") != bool(triton_url):
        raise ValueError("mode 'attached' takes the running Triton's gRPC address as triton_url (host:port), and "
                         "only that mode does")
    if mode == "attached":
        return AttachedTriton(str(triton_url), repo, model_name)
    if mode == "in-process":
        return InProcessTriton(repo, model_name)
    return ManagedTriton(repo, model_name, ready_timeout_s)
