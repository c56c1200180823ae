"""What an engine start leaves in the server's log for a start that hangs: every thread's Python
stack when it takes longer than the vLLM backend's STACKS_AFTER_S (once; the owned Triton of this
folder, conftest.py, starts with the threshold at one second), and the line saying initialize()
returned (each Python model writes it), which tells a load that stalls in the server afterwards
(``crashes.stalled_loads``)."""
import time
from pathlib import Path

import requests

from scripts.triton import crashes
from scripts.procs.process_guard import rpc_dir


def test_a_slow_engine_start_leaves_its_stacks_in_the_log_and_serves(owned_triton):
    log = Path(owned_triton.info["log"]).read_text(errors="replace")
    assert "Thread 0x" in log and "(most recent call first)" in log
    assert "in initialize" in log  # the stub's main thread, waiting for the engine
    assert "Fatal Python error" not in log  # a dump, not a crash
    # every Python model of the ensemble says when its initialize() returned: a stalled load is told for each
    assert sorted(m.group(1) for m in crashes.INITIALIZED_LINE.finditer(log)) == ["postprocessing", "preprocessing", "vllm_engine"]
    assert crashes.stalled_loads(log, time.time(), 0) == []  # Triton logged the load after it
    # vLLM binds its ZeroMQ sockets in the server's own folder (VLLM_RPC_BASE_PATH), not in /tmp itself
    assert any(path.is_socket() for path in rpc_dir(owned_triton.info["shm_prefix"]).iterdir())
    r = requests.post(f"{owned_triton.http_url}/v2/models/ensemble/generate", json={"text_input": "Ray", "max_tokens": 4},
                      timeout=60)
    assert r.status_code == 200 and r.json()["text_output"], r.text
