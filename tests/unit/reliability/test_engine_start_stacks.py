"""An engine start that takes longer than the vLLM backend's STACKS_AFTER_S writes every thread's
Python stack into the server's log, once, and goes on: a hung start can be told from a slow one.
The owned Triton of this folder (conftest.py) starts with the threshold at one second."""
from pathlib import Path

import requests


def test_a_slow_engine_start_leaves_its_stacks_in_the_log_and_serves(owned_triton):
    log = Path(owned_triton.info["log"]).read_text(errors="replace")
    assert "Thread 0x" in log and "(most recent call first)" in log
    assert "in initialize" in log  # the stub's main thread, waiting for the engine
    assert "Fatal Python error" not in log  # a dump, not a crash
    r = requests.post(f"{owned_triton.http_url}/v2/models/ensemble/generate", json={"text_input": "Ray", "max_tokens": 4},
                      timeout=60)
    assert r.status_code == 200 and r.json()["text_output"], r.text
