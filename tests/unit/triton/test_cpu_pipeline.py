"""The cpu profile end to end on a real tritonserver (the nvidia-pytriton wheel's) with vLLM:
ensemble, BLS and the engine model called directly, on a repository filled decoupled (as notebook
05 fills it) and not (notebooks 02 and 04), started side by side: vLLM starts inside each Triton."""
from __future__ import annotations

import json
import os
import queue
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from scripts.engine.config import write_engine_config
from scripts.paths import BUILD_DIR_ENV
from scripts.profiles import load_profile
from scripts.triton.engine_request import engine_model_request, generated_ids, tritonclient_args
from scripts.procs.process_guard import engine_processes
from scripts.triton.repository.fill import RepoSettings, fill_for_profile
from scripts.triton.server import TritonServer

from fakes import install_model

PROMPT = "Ray Serve takes"


@pytest.fixture(scope="module")
def servers(tmp_path_factory, tiny_llama):
    """Both repositories served at once: a start is mostly single-threaded imports (the stubs and
    vLLM's processes), so two starts side by side take little longer than one."""
    build = tmp_path_factory.mktemp("build")
    before = os.environ.get(BUILD_DIR_ENV)
    os.environ[BUILD_DIR_ENV] = str(build)
    started = {}
    try:
        profile = load_profile("cpu")
        install_model(tiny_llama, profile)
        write_engine_config(profile)
        for decoupled in (True, False):
            repo = Path(fill_for_profile(profile, RepoSettings(decoupled_mode=decoupled),
                                         output_dir=build / f"repo-{'decoupled' if decoupled else 'not-decoupled'}")["repository"])
            started[decoupled] = (TritonServer(repo, extra_args=("--model-control-mode=explicit", "--load-model=ensemble",
                                                                 "--load-model=tensorrt_llm_bls")), repo)
        with ThreadPoolExecutor(len(started)) as pool:
            for future in [pool.submit(server.start, timeout_s=300, retries=1) for server, _ in started.values()]:
                future.result()
        yield {decoupled: (server, repo, profile.path("model_dir"), decoupled) for decoupled, (server, repo) in started.items()}
    finally:
        for server, _ in started.values():
            server.stop()
        if before is None:
            os.environ.pop(BUILD_DIR_ENV, None)
        else:
            os.environ[BUILD_DIR_ENV] = before


@pytest.fixture(params=[True, False], ids=["decoupled", "not-decoupled"])
def served(request, servers):
    """A server that crashed since the last test (2.51 has, rarely, between requests on two cores) is
    started again, and the crash reported on stderr, rather than failing every test after it."""
    server = servers[request.param][0]
    server.restart_if_crashed(timeout_s=300)
    return servers[request.param]


def generate(server, model: str, **body) -> requests.Response:
    return requests.post(f"{server.http_url}/v2/models/{model}/generate", json=body, timeout=120)


def test_bls_answers_without_streaming_from_the_decoupled_engine(served):
    server, _, _, _ = served
    ensemble = generate(server, "ensemble", text_input=PROMPT, max_tokens=12)
    bls = generate(server, "tensorrt_llm_bls", text_input=PROMPT, max_tokens=12)
    assert ensemble.status_code == bls.status_code == 200, (ensemble.text, bls.text)
    assert bls.json()["text_output"] == ensemble.json()["text_output"] and ensemble.json()["text_output"].strip()


def test_bls_stream_joins_to_the_same_text(served):
    server, _, _, decoupled = served
    if not decoupled:
        pytest.skip("streaming needs the decoupled policy")
    whole = generate(server, "tensorrt_llm_bls", text_input=PROMPT, max_tokens=8).json()["text_output"]
    r = requests.post(f"{server.http_url}/v2/models/tensorrt_llm_bls/generate_stream",
                      json={"text_input": PROMPT, "max_tokens": 8, "stream": True}, timeout=120)
    chunks = [json.loads(line[len("data: "):])["text_output"] for line in r.text.splitlines() if line.startswith("data: ")]
    assert r.status_code == 200 and len(chunks) > 1 and "".join(chunks) == whole


def test_direct_engine_request_gives_the_ensemble_tokens(served):
    import tritonclient.grpc as grpcclient
    from transformers import AutoTokenizer

    server, repo, model_dir, decoupled = served
    expected = np.asarray(generate(server, "ensemble", text_input=PROMPT, max_tokens=12).json()["output_ids"])
    ids = AutoTokenizer.from_pretrained(model_dir)(PROMPT)["input_ids"]
    req = engine_model_request(repo, ids, 12)
    assert req.model_name == "vllm_engine"
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs, outputs = tritonclient_args(req, grpcclient)
    try:
        if decoupled:  # a decoupled model answers on a stream only
            answers: queue.Queue = queue.Queue()
            client.start_stream(callback=lambda result, error: answers.put((result, error)))
            client.async_stream_infer(req.model_name, inputs, outputs=outputs)
            result, error = answers.get(timeout=120)
            client.stop_stream()
            assert error is None, error
        else:
            result = client.infer(req.model_name, inputs, outputs=outputs)
        assert generated_ids(req, {n: result.as_numpy(n) for n in req.outputs}) == expected.reshape(-1).tolist()
    finally:
        client.close()


@pytest.mark.parametrize("model,prefix", [("ensemble", "in ensemble 'ensemble', "), ("tensorrt_llm_bls", "")])
def test_too_long_prompt_is_a_400_with_the_same_text(served, model, prefix):
    server, _, _, _ = served
    r = generate(server, model, text_input="Triton " * 600, max_tokens=32)
    assert r.status_code == 400
    assert r.json()["error"] == (f"{prefix}the prompt has 602 tokens and max_tokens is 32: together more than the "
                                 "model's limit of 512 tokens; shorten the prompt or lower max_tokens")


def test_the_engine_processes_start_as_the_profile_says(served):
    """With ``engine_start_method = "fork"`` vLLM's engine core and worker are copies of the stub that
    runs the engine model (its executable); with vLLM's own "spawn" they would run ``python3``."""
    server, _, _, _ = served
    method = load_profile("cpu")["engine_start_method"]
    engines = engine_processes(server.pid)
    assert sorted(title for _, title, _ in engines) == ["VLLM::EngineCore", "VLLM::Worker"], engines
    stub = "triton_python_backend_stub"
    assert all(Path(executable).name == stub for _, _, executable in engines) == (method == "fork"), engines
    # either way the worker's threads keep the CPUs vLLM bound them to (its log: "core ids=[0]")
    bound = {int(c) for c in re.findall(r"core ids=\[([\d, ]+)\]", server.log_path.read_text())[-1].split(",")}
    worker = next(pid for pid, title, _ in engines if title == "VLLM::Worker")
    assert {frozenset(os.sched_getaffinity(int(t.name))) for t in Path(f"/proc/{worker}/task").iterdir()} == {frozenset(bound)}
