import asyncio
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from scripts.engine import config as engine

from scripts.triton import client as triton_llm
from scripts.profiles import load_profile
from scripts.triton.client import (CHUNK_OUTPUTS, Chunk, InProcessTriton, chunk_from_outputs, model_outputs,
                                in_process_available, make_backend)
from scripts.triton.repository.fill import RepoSettings, fill_for_profile, read_model_config, repository_facts
from scripts.triton.sampling import EnsembleRequest, ensemble_inputs

from fakes import CHUNKS, FakeEnsemble


def test_chunk_from_outputs():
    assert chunk_from_outputs(np.array([[b"hi \xe2\x82\xac"]], dtype=object), np.array([[3]], dtype=np.int32)) == Chunk("hi €", 3)
    assert chunk_from_outputs(np.array([["plain"]], dtype=object), None) == Chunk("plain", 0)
    assert chunk_from_outputs(np.array([], dtype=object), np.array([], dtype=np.int32)) == Chunk("", 0)
    ids = np.array([[[7, 8, 9, 0]]], dtype=np.int32)  # [batch, beams, tokens], padded past sequence_length
    assert chunk_from_outputs(np.array([[b"\xef\xbf\xbd"]], dtype=object), np.array([[3]], dtype=np.int32), ids) == Chunk("\ufffd", 3, [7, 8, 9])
    assert chunk_from_outputs(np.array([[b"x"]], dtype=object), None, ids).ids == [7, 8, 9, 0]
    assert chunk_from_outputs(None, None, ids) == Chunk("", 4, [7, 8, 9, 0])  # an engine model: ids only, counted
    assert chunk_from_outputs(None, np.array([[2]], dtype=np.int32), ids) == Chunk("", 2, [7, 8])


def test_model_outputs_asks_only_for_what_the_model_declares(filled_repo, tmp_path):
    assert model_outputs(filled_repo) == CHUNK_OUTPUTS == ("text_output", "sequence_length", "output_ids")
    config = read_model_config(filled_repo, "ensemble")  # as TensorRT-LLM's stock ensemble: no output_ids
    del config.output[[output.name for output in config.output].index("output_ids")]
    stock = tmp_path / "stock"
    (stock / "ensemble").mkdir(parents=True)
    (stock / "ensemble" / "config.pbtxt").write_text(text_format.MessageToString(config))
    assert model_outputs(stock) == ("text_output", "sequence_length")
    engine = repository_facts(filled_repo).engine_model  # an engine model answers in token ids
    assert model_outputs(filled_repo, engine) == ("sequence_length", "output_ids")
    with pytest.raises(ValueError, match="has neither text_output nor output_ids"):
        model_outputs(filled_repo, "preprocessing")


def test_in_process_api_is_not_on_pypi():
    assert in_process_available() is False  # PyPI has only a placeholder; NGC containers have the module


@pytest.fixture
def filled_repo(build_root):
    profile = load_profile("cpu")
    engine.write_engine_config(profile)
    return Path(fill_for_profile(profile, RepoSettings(decoupled_mode=True))["repository"])


def test_make_backend_needs_a_filled_ensemble_and_a_known_mode(tmp_path, filled_repo):
    with pytest.raises(FileNotFoundError, match="fill the repository first"):
        make_backend(tmp_path, "ensemble")
    with pytest.raises(ValueError, match="auto, in-process, managed or attached"):
        make_backend(filled_repo, "ensemble", mode="remote")
    with pytest.raises(ValueError, match="triton_url"):
        make_backend(filled_repo, "ensemble", mode="attached")
    with pytest.raises(ValueError, match="triton_url"):
        make_backend(filled_repo, "ensemble", mode="managed", triton_url="127.0.0.1:8001")
    attached = make_backend(filled_repo, "ensemble", mode="attached", triton_url="127.0.0.1:8001")
    assert attached.info()["grpc_url"] == "127.0.0.1:8001" and attached.mode == "attached"


class FakeTensor:
    """The in-process API's output tensor, its BYTES accessors as in
    triton-inference-server/core@r25.02:python/tritonserver/_api/_tensor.py."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def to_bytes_array(self):
        return np.array(self.array, dtype=np.object_)

    def to_string_array(self):
        return self.to_bytes_array().astype(str)  # r25.02's own: NumPy decodes as ASCII

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def fake_tritonserver(responses):
    """A stand-in for the NGC-only ``tritonserver`` module, recording how it is called."""
    calls = {}

    class Model:
        def ready(self):
            return True

        async def async_infer(self, inputs, parameters=None):
            # triton-inference-server/core@r25.02:python/tritonserver/_api/_model.py: Model.async_infer
            # takes the InferenceRequest's fields as keywords (inputs, parameters, ...)
            calls["inputs"], calls["parameters"] = inputs, parameters
            for r in responses:
                yield r

    class Server:
        def __init__(self, **options):
            calls["options"] = options

        def start(self, wait_until_ready):
            calls["started"] = wait_until_ready

        def load(self, name):
            calls["loaded"] = name
            return Model()

        def ready(self):
            return True

        def stop(self):
            calls["stopped"] = True

    module = types.SimpleNamespace(Server=Server, ModelControlMode=types.SimpleNamespace(EXPLICIT="explicit"))
    return module, calls


def response(text=None, tokens=None, error=None, ids=None):
    outputs = {}
    if text is not None:
        outputs = {"text_output": FakeTensor(np.array([[text.encode()]], dtype=object)),
                   "sequence_length": FakeTensor(np.array([[tokens]], dtype=np.int32))}
    if ids is not None:
        outputs["output_ids"] = FakeTensor(np.array([[ids]], dtype=np.int32))
    return types.SimpleNamespace(outputs=outputs, error=error)


def test_auto_mode_embeds_triton_where_tritonserver_imports(monkeypatch, filled_repo):
    module, calls = fake_tritonserver([response("Triton", 1), response(" loads", 2, ids=[5, 6]), response()])
    monkeypatch.setitem(sys.modules, "tritonserver", module)
    monkeypatch.setattr(triton_llm, "in_process_available", lambda: True)
    backend = make_backend(filled_repo, "ensemble")
    assert isinstance(backend, InProcessTriton) and backend.mode == "in-process"
    assert calls["options"]["model_repository"] == str(filled_repo) and calls["loaded"] == "ensemble" and calls["started"]

    async def run():
        assert await backend.ready()
        return [c async for c in backend.generate(ensemble_inputs(EnsembleRequest("p", 4, stream=True), 10))]

    assert asyncio.run(run()) == [Chunk("Triton", 1), Chunk(" loads", 2, [5, 6])]
    assert set(calls["inputs"]) == {"text_input", "max_tokens", "stream"}
    backend.stop()
    assert calls["stopped"] and backend.info()["mode"] == "in-process"


def test_in_process_errors_raise_triton_request_error(monkeypatch, filled_repo):
    module, _ = fake_tritonserver([response(error="in ensemble 'ensemble', text_input is empty")])
    monkeypatch.setitem(sys.modules, "tritonserver", module)
    backend = make_backend(filled_repo, "ensemble", mode="in-process")

    async def run():
        return [c async for c in backend.generate({})]

    with pytest.raises(triton_llm.TritonRequestError, match="text_input is empty"):
        asyncio.run(run())


def test_auto_mode_manages_a_process_without_the_module(monkeypatch, filled_repo):
    started = []
    monkeypatch.setattr(triton_llm, "ManagedTriton", lambda *a: started.append(a) or "managed")
    assert make_backend(filled_repo, "ensemble", ready_timeout_s=5) == "managed"
    assert started == [(filled_repo, "ensemble", 5)]


def test_repository_facts(filled_repo, build_root):
    facts = repository_facts(filled_repo)
    assert facts.engine_model == "vllm_engine" and facts.decoupled and facts.max_model_len == 512
    assert facts.tokenizer_dir.endswith("models/tiny-llama") and facts.skip_special_tokens
    plain = Path(fill_for_profile(load_profile("cpu"), RepoSettings(), output_dir=build_root / "plain")["repository"])
    assert not repository_facts(plain).decoupled
    with pytest.raises(ValueError, match="preprocessing, one engine model and postprocessing"):
        repository_facts(filled_repo, "preprocessing")
    with pytest.raises(FileNotFoundError, match="fill the repository first"):
        repository_facts(build_root / "nowhere")


NON_ASCII = "Triton \u00e9quilibre \u20ac \u4e2d"


def test_in_process_generate_returns_non_ascii_text(monkeypatch, filled_repo):
    # core r25.02's to_string_array() raises on this text; the client decodes the bytes itself
    with pytest.raises(UnicodeDecodeError):
        FakeTensor(np.array([[NON_ASCII.encode()]], dtype=object)).to_string_array()
    module, _ = fake_tritonserver([response(NON_ASCII, 4, ids=[5, 6, 7, 8])])
    monkeypatch.setitem(sys.modules, "tritonserver", module)
    backend = make_backend(filled_repo, "ensemble", mode="in-process")

    async def run():
        return [c async for c in backend.generate({})]

    assert asyncio.run(run()) == [Chunk(NON_ASCII, 4, [5, 6, 7, 8])]


def test_text_array_decodes_utf8_and_replaces_a_cut_character():
    assert triton_llm.text_array(FakeTensor(np.array([[NON_ASCII.encode()]], dtype=object))).tolist() == [[NON_ASCII]]
    assert triton_llm.text_array(FakeTensor(np.array([[b"cut \xe2\x82"]], dtype=object))).tolist() == [["cut \ufffd"]]


def test_attached_triton_calls_a_running_triton_and_never_stops_it(monkeypatch, filled_repo):
    made = []

    class Ensemble(FakeEnsemble):
        """:class:`GrpcModel` as AttachedTriton builds it, over no Triton."""

        def __init__(self, grpc_url, model_name, outputs):
            super().__init__()
            made.append((grpc_url, model_name, outputs))
            self.is_ready = True

        async def ready(self):
            return self.is_ready

    monkeypatch.setattr(triton_llm, "GrpcModel", Ensemble)
    backend = triton_llm.AttachedTriton("127.0.0.1:8001", filled_repo)
    assert made == [("127.0.0.1:8001", "ensemble", CHUNK_OUTPUTS)]  # the outputs the filled ensemble declares
    assert backend.mode == "attached"
    assert backend.info() == {"mode": "attached", "model": "ensemble", "model_repository": str(filled_repo),
                              "grpc_url": "127.0.0.1:8001"}

    async def ready_and_chunks():
        return await backend.ready(), [c async for c in backend.generate({})]

    assert asyncio.run(ready_and_chunks()) == (True, CHUNKS)
    backend.model_client.is_ready = False
    assert asyncio.run(backend.ready()) is False
    backend.model_client.is_ready = True
    assert backend.stop() is None  # the Triton is its owner's: nothing stopped, nothing closed
    assert not backend.model_client.closed and asyncio.run(ready_and_chunks()) == (True, CHUNKS)
    assert backend.model_client.requests == 2


@pytest.mark.parametrize("importable, auto", [(True, "in-process"), (False, "managed")])
def test_auto_resolves_to_in_process_exactly_where_tritonserver_imports(monkeypatch, importable, auto):
    from scripts.triton import client

    monkeypatch.setattr(client, "in_process_available", lambda: importable)
    assert client.resolve_mode("auto") == auto
    assert [client.resolve_mode(m) for m in ("in-process", "managed", "attached")] == ["in-process", "managed", "attached"]
    with pytest.raises(ValueError, match="auto, in-process, managed or attached"):
        client.resolve_mode("remote")


def test_a_notebook_that_needs_triton_s_process_refuses_in_process(monkeypatch):
    """In the NGC container (tritonserver importable) auto would embed Triton in the replica: no PID to kill,
    no gRPC port to call. Refused up front with the fix, not with a KeyError sections later."""
    from scripts.triton import client

    monkeypatch.setattr(client, "in_process_available", lambda: True)
    assert client.own_process_mode("managed", "section 11 kills it") == "managed"
    for mode in ("auto", "in-process"):
        with pytest.raises(ValueError, match=rf"TRITON_MODE='{mode}' runs Triton in-process.*section 11 kills it: "
                                             r"use TRITON_MODE='managed'"):
            client.own_process_mode(mode, "section 11 kills it")
    monkeypatch.setattr(client, "in_process_available", lambda: False)
    assert client.own_process_mode("auto", "section 11 kills it") == "managed"


def test_notebook_05_runs_a_triton_process_of_its_own_where_tritonserver_imports(monkeypatch):
    """Notebook 05 kills its replica's Triton by PID and benchmarks its gRPC port: its TRITON_MODE must give a
    managed process in the NGC container too, where the tritonserver module imports."""
    import ast
    import json

    from scripts.paths import NOTEBOOK_DIR
    from scripts.triton import client

    cells = json.loads((NOTEBOOK_DIR / "05_serve_with_ray.ipynb").read_text())["cells"]
    params = next("".join(c["source"]) for c in cells if "parameters" in c["metadata"].get("tags", []))
    (mode,) = [ast.literal_eval(n.value) for n in ast.parse(params).body if isinstance(n, ast.Assign)
               and [t.id for t in n.targets] == ["TRITON_MODE"]]
    monkeypatch.setattr(client, "in_process_available", lambda: True)
    assert client.own_process_mode(mode, "notebook 05 kills its process") == "managed"
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "own_process_mode(TRITON_MODE" in code and '"mode": TRITON_MODE' not in code


def test_a_request_to_an_address_where_no_triton_answers_is_unavailable_and_names_it():
    """Triton crashed or restarting: gRPC's UNAVAILABLE becomes TritonUnavailable (a replica's 503),
    not the raw AioRpcError (which the routes would turn into a bare 500 with a traceback)."""
    from scripts.procs.ports import free_port  # noqa: PLC0415

    url = f"127.0.0.1:{free_port()}"
    model = triton_llm.GrpcModel(url)
    inputs = {"text_input": np.array([["hi"]], dtype=object), "max_tokens": np.array([[4]], dtype=np.int32)}

    async def first():
        try:
            return [chunk async for chunk in model.generate(inputs)]
        finally:
            await model.close()

    with pytest.raises(triton_llm.TritonUnavailable, match=f"no Triton answers at {url}"):
        asyncio.run(first())
