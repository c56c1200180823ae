"""scripts.triton.backends: where each engine's instances run and whether Triton loads them in parallel,
checked against the repository's own templates; and what notebook 06 measures with it (load_triton)."""
import re
from pathlib import Path

import pytest

from scripts.lab import gpu_conflicts as gc
from scripts.paths import TEMPLATE_DIR
from scripts.profiles import available_profiles, load_profile
from scripts.triton.backends import IN_SERVER, IN_STUBS, engine_backend
from scripts.triton.repository.fill import ENGINE_MODEL


@pytest.mark.parametrize("name", available_profiles())
def test_each_profiles_engine_has_the_backend_its_template_names(name):
    engine = load_profile(name).engine
    facts = engine_backend(engine)
    template = (TEMPLATE_DIR / ENGINE_MODEL[engine] / "config.pbtxt").read_text()
    assert re.search(rf'^backend:\s*"{facts.backend}"', template, re.M), (engine, facts.backend)
    # a Python-based backend runs each instance in a stub and loads them together; the C++ tensorrtllm
    # backend runs them in tritonserver itself, one after another
    assert (facts.instances_in == IN_STUBS) == facts.parallel_loading == (facts.backend != "tensorrtllm")


def test_tensorrt_llm_instances_share_tritonservers_process():
    trtllm, transformers = engine_backend("tensorrt_llm"), engine_backend("transformers")
    assert (trtllm.instances_in, trtllm.parallel_loading, trtllm.gpu_processes(8)) == (IN_SERVER, False, 1)
    assert (transformers.instances_in, transformers.parallel_loading, transformers.gpu_processes(8)) == (IN_STUBS, True, 8)
    with pytest.raises(ValueError, match="unknown engine 'onnx'"):
        engine_backend("onnx")


class FakeServer:
    """scripts.triton.server.TritonServer as load_triton uses it: tritonserver (pid 100) and two stubs."""

    def __init__(self, repo, exit_timeout_s=5):
        self.pid, self.log_path, self.stopped = 100, Path("/nonexistent.log"), False

    def start(self, timeout_s):
        pass

    def group_members(self):
        return [100, 101, 102]

    def stop(self):
        self.stopped = True


@pytest.mark.parametrize("engine, held", [("tensorrt_llm", [6 * 2**30]), ("transformers", [2**30, 2 * 2**30])])
def test_load_triton_measures_the_processes_that_hold_the_instances(monkeypatch, engine, held):
    from scripts.triton import server

    monkeypatch.setattr(server, "TritonServer", FakeServer)
    per_pid = {100: 6 * 2**30, 101: 2 * 2**30, 102: 2**30, 999: 5 * 2**30}  # 999: another process on the GPU
    facts = engine_backend(engine)
    load = gc.load_triton(Path("/repo"), measure=lambda: per_pid, instances_in=facts.instances_in)
    assert load.loaded and load.process_bytes == held
    assert len(load.process_bytes) == facts.gpu_processes(2)
    if facts.instances_in == IN_SERVER:
        assert load.format() == "Triton ready: the instances run inside tritonserver's own process, which holds 6.0 GiB on the GPU"
    with pytest.raises(ValueError, match="instances_in must be"):
        gc.load_triton(Path("/repo"), instances_in="workers")
