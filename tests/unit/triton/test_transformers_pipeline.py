"""The gpu-transformers engine inside a real tritonserver (the nvidia-pytriton wheel's), on the CPU
with the tiny Llama: the same backend code that runs KIND_GPU on a GPU host, kept running in CI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from scripts.engine import run
from scripts.triton.repository.fill import RepoSettings, fill_for_profile
from scripts.triton.server import TritonServer

from fakes import transformers_engine_on_cpu

PROMPTS = ["Ray Serve takes", "The tokenizer turns"]


@pytest.fixture(scope="module")
def started(tmp_path_factory, tiny_llama):
    build = tmp_path_factory.mktemp("build")
    with transformers_engine_on_cpu(build, tiny_llama) as (profile, engine_dir):
        reference = build / "ref.json"
        proc = run.run_cli(run.cli_command(engine_dir, PROMPTS, 16, output_json=reference), timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        repo = Path(fill_for_profile(profile, RepoSettings(decoupled_mode=True))["repository"])
        assert "kind: KIND_CPU" in (repo / "transformers_engine" / "config.pbtxt").read_text()
        server = TritonServer(repo, extra_args=("--model-control-mode=explicit", "--load-model=ensemble"))
        with server.start(timeout_s=300, retries=1):
            yield server, json.loads(reference.read_text())


@pytest.fixture
def served(started):
    """The module's server, started again if it crashed since the last test (reported on stderr)."""
    started[0].restart_if_crashed(timeout_s=300)
    return started


def generate(server, **body) -> requests.Response:
    return requests.post(f"{server.http_url}/v2/models/ensemble/generate", json=body, timeout=120)


def test_triton_reproduces_run_py(served):
    server, reference = served
    for ref in reference["results"]:
        r = generate(server, text_input=ref["input_text"], max_tokens=reference["max_output_len"])
        assert r.status_code == 200, r.text
        assert r.json()["output_ids"] == ref["output_ids"] and r.json()["text_output"] == ref["output_text"]


def test_stop_words_end_the_text_at_the_word(served):
    server, _ = served
    plain = generate(server, text_input=PROMPTS[0], max_tokens=12).json()["text_output"]
    word = plain.split()[2]
    stopped = generate(server, text_input=PROMPTS[0], max_tokens=12, stop_words=[word]).json()["text_output"]
    assert stopped == plain[:plain.index(word) + len(word)]


@pytest.mark.parametrize("extra, says", [({"temperature": 0.7, "top_p": 0.5}, "greedily"),
                                         ({"bad_words": [" the"]}, "bad_words"),
                                         ({"bad_words": [" the traffic, balances"]}, "bad_words")])
def test_what_the_engine_cannot_do_is_a_400_and_serving_goes_on(served, extra, says):
    server, _ = served
    r = generate(server, text_input=PROMPTS[0], max_tokens=8, **extra)
    assert r.status_code == 400 and says in r.json()["error"], r.text
    assert generate(server, text_input=PROMPTS[0], max_tokens=4).status_code == 200


def test_stream_sends_one_event_per_token(served):
    server, reference = served
    with requests.post(f"{server.http_url}/v2/models/ensemble/generate_stream", stream=True, timeout=120,
                       json={"text_input": PROMPTS[0], "max_tokens": 8, "stream": True}) as r:
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith(b"data:")]
    assert len(events) == 8 and [e["output_ids"] for e in events] == reference["results"][0]["output_ids"][:8]
