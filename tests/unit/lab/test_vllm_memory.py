"""scripts.lab.vllm_memory: notebook 06's vLLM sections without a GPU (the estimate, the repositories, two
Tritons started side by side, with a stand-in server), and scripts.monitor.gpu.memory_of."""
import json
from pathlib import Path

import pytest

from scripts.lab import gpu_conflicts as gc
from scripts.lab import vllm_memory as vm
from scripts.model.configs import LLAMA_3_2_1B
from scripts.monitor.gpu import memory_of
from scripts.profiles import load_profile

H100 = 81_559 * 2**20


@pytest.fixture
def gpu_vllm(tmp_path, monkeypatch):
    """Profile gpu-vllm whose model and engine folders are tmp_path (Llama-3.2-1B's config, an engine config)."""
    profile = load_profile("gpu-vllm")
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_3_2_1B))
    (tmp_path / "engine_config.json").write_text(json.dumps(
        {"engine": "vllm", "model_dir": "/m", "dtype": "bfloat16", "max_model_len": 2048, "max_num_seqs": 256,
         "gpu_memory_utilization": 0.12, "instance_kind": "KIND_GPU"}))
    monkeypatch.setattr(type(profile), "path", lambda self, key: tmp_path)
    return profile


def test_two_engines_at_the_default_do_not_fit_one_gpu_and_the_safe_utilization_does(gpu_vllm):
    assert vm.reserves_of_total(gpu_vllm) and not vm.reserves_of_total(load_profile("gpu-transformers"))
    assert vm.estimate(gpu_vllm, 0.9, H100).fits
    assert not vm.estimate(gpu_vllm, 0.9, H100, replicas_per_gpu=2).fits
    assert not vm.estimate(gpu_vllm, 0.9, H100, instances=8).fits
    safe = vm.safe_utilization(gpu_vllm, H100, 2)
    assert safe == 0.45 and vm.estimate(gpu_vllm, safe, H100, replicas_per_gpu=2).fits
    assert not vm.estimate(gpu_vllm, safe + 0.01, H100, replicas_per_gpu=2).fits
    assert vm.safe_utilization(gpu_vllm, H100, 2, at_most=0.3) == 0.3
    assert vm.safe_utilization(gpu_vllm, 4 * 2**30, 2) is None  # a 1B engine's full batch needs more than 4 GiB
    with pytest.raises(ValueError, match="safe_kv_fraction"):
        vm.estimate(load_profile("gpu-transformers"), 0.5, H100)


def test_engine_only_repository_sets_vllms_utilization_in_a_copy_of_the_engine_config(gpu_vllm, tmp_path):
    repo = gc.engine_only_repository(gpu_vllm, tmp_path / "out", count=2, utilization=0.45)
    config = (repo / "vllm_engine" / "config.pbtxt").read_text()
    assert "count: 2 kind: KIND_GPU" in config and f'"{tmp_path / "out" / "engine"}"' in config
    variant = json.loads((tmp_path / "out" / "engine" / "engine_config.json").read_text())
    assert variant["gpu_memory_utilization"] == 0.45 and variant["model_dir"] == "/m"
    with pytest.raises(ValueError, match="within"):
        gc.engine_only_repository(gpu_vllm, tmp_path / "x", count=1, utilization=1.5)


class FakeServer:
    """TritonServer as started_triton uses it; the second Triton under a folder named 'refused' does not start."""
    running: list = []
    started: list = []  # what the tests' crash report (conftest.py) reads of TritonServer

    def __init__(self, repo, exit_timeout_s=5):
        self.repo, self.pid = Path(repo), 100 + len(FakeServer.running) * 10
        self.log_path = self.repo / "log"

    def start(self, timeout_s):
        from scripts.triton.server import TritonStartError

        if self.repo.parent.name == "second" and self.repo.parent.parent.name == "refused":
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path.write_text("E1206 10:00:00.1 12 model_lifecycle.cc:654] failed to load 'vllm_engine' version 1: "
                                     "ValueError: Free memory on device cuda:0 (7.4/79.2 GiB) on startup is less than "
                                     "desired GPU memory utilization (0.9, 71.3 GiB).\n")
            raise TritonStartError("tritonserver exited")
        FakeServer.running.append(self)

    def group_members(self):
        return [self.pid, self.pid + 1]

    def stop(self):
        FakeServer.running.remove(self)


def test_two_engines_keeps_the_first_running_while_the_second_starts(gpu_vllm, tmp_path, monkeypatch):
    from scripts.triton import server

    monkeypatch.setattr(server, "TritonServer", FakeServer)
    def measure():
        return {101: 5 * 2**30, 111: 4 * 2**30, 7: 2**30}  # 7: another process on the GPU
    both = vm.two_engines(gpu_vllm, tmp_path / "ok", 0.45, measure=measure)
    assert both.first.loaded and both.second.loaded and not FakeServer.running
    assert both.first.process_bytes == [5 * 2**30] and both.second.process_bytes == [4 * 2**30]
    refused = vm.two_engines(gpu_vllm, tmp_path / "refused", 0.9, measure=measure)
    assert refused.first.loaded and not refused.second.loaded and not FakeServer.running
    assert refused.second.errors[0].startswith("failed to load 'vllm_engine' version 1: ValueError: Free memory on device")
    assert "gpu_memory_utilization 0.9 each" in refused.format() and "second Triton, beside it: Triton did not" in refused.format()


def test_error_lines_put_vllms_memory_refusal_first():
    log = ("E1206 10:00:01.2 12 pb_stub.cc:1] ValueError: Free memory on device cuda:0 (7.4/79.2 GiB) on startup is "
           "less than desired GPU memory utilization (0.9, 71.3 GiB).\n"
           "E1206 10:00:02.0 12 server.cc:1] Error: failed to load all models\n")
    assert gc.error_lines(log)[0].startswith("ValueError: Free memory on device")


def test_memory_of_waits_until_enough_processes_hold_memory_and_stay():
    # an old engine (3) still unloading, then gone; 9 is another program's process on the GPU
    seen = iter([{1: 3}, {1: 3, 2: 4, 3: 5, 9: 1}, {1: 3, 2: 4, 9: 1}, {1: 3, 2: 4, 9: 1}, {1: 3, 2: 4, 9: 1}])
    assert memory_of(lambda: [1, 2, 3], 2, poll_s=0, measure=lambda: next(seen)) == [3, 4]
    with pytest.raises(TimeoutError, match="1 processes hold GPU memory .* expected 2 or more"):
        memory_of(lambda: [1, 2, 3], 2, timeout_s=0, poll_s=0, measure=lambda: {1: 2**30})


# Two engines of one model started together, as an H200 logged them (notebook 06, section 9): the second counted
# the first's KV cache as its own non-torch memory. Progress bars of both share lines with their INFO lines.
TOGETHER_LOG = """\
(EngineCore pid=9747) INFO 12-06 20:27:56 [kv_cache_utils.py:2177] GPU KV cache size: 3,932,032 tokens
(EngineCore pid=9747) Capturing CUDA graphs:  8%|7   | 4/51(EngineCore pid=9795) INFO 12-06 20:27:56 [backends.py:292] loaded
(EngineCore pid=9795) INFO 12-06 20:27:57 [kv_cache_utils.py:2177] GPU KV cache size: 104,640 tokens
(EngineCore pid=9747) INFO 12-06 20:27:58 [gpu_worker.py:857] Actual usage is 2.32 GiB for weight, 0.15 GiB for \
peak activation, 3.36 GiB for non-torch memory, and 3.84 GiB for CUDAGraph memory.
Capturing CUDA graphs: 86%|8  | 44/51(EngineCore pid=9795) INFO 12-06 20:28:00 [gpu_worker.py:857] Actual usage is \
2.32 GiB for weight, 0.15 GiB for peak activation, 120.16 GiB for non-torch memory, and 0.52 GiB for CUDAGraph memory.
"""


def test_engine_starts_reads_each_engines_kv_cache_and_counted_memory_from_tritons_log():
    starts = vm.engine_starts(TOGETHER_LOG)
    assert starts == [vm.EngineStart(9747, 3_932_032, 3.36), vm.EngineStart(9795, 104_640, 120.16)]
    assert vm.engine_starts("(EngineCore pid=1) Capturing (EngineCore pid=2) INFO x GPU KV cache size: 5 tokens") == \
        [vm.EngineStart(2, 5, None)]
    assert vm.engine_starts("I1206 model loaded\n") == []


def test_instances_together_names_the_starved_engine(gpu_vllm, tmp_path, monkeypatch):
    from scripts.triton import server

    class LoggingServer(FakeServer):
        def start(self, timeout_s):
            self.log_path.write_text(TOGETHER_LOG)
            super().start(timeout_s)

    monkeypatch.setattr(server, "TritonServer", LoggingServer)
    together = vm.instances_together(gpu_vllm, tmp_path / "asked", 2, 0.9, measure=lambda: {101: 7 * 2**30})
    assert together.load.loaded and not LoggingServer.running and together.load.log_path.name == "log"
    assert [e.pid for e in together.starved] == [9795]
    text = together.format()
    assert "instance_group count 2 at gpu_memory_utilization 0.9: Triton ready" in text
    assert "engine pid 9795: KV cache 104,640 tokens, counting 120.2 GiB as its own non-torch memory" in text
    assert "1 of 2 engines got less than 50% of the largest KV cache" in text
    balanced = vm.Instances(2, 0.45, together.load, [vm.EngineStart(1, 100), vm.EngineStart(2, 90)])
    assert not balanced.starved and "got less than" not in balanced.format()
    assert not vm.Instances(1, 0.9, together.load, []).starved


def test_error_lines_skip_vllms_info_lines_and_keep_the_root_cause():
    # instance_group count 2 at 0.9 on an H200: the engine that started well logs an INFO line about memory;
    # the other one's reason lies further up than the server's generic failures
    log = ("(EngineCore pid=7) ERROR 12-06 22:56:40 [core.py:1] ValueError: No available memory for the cache blocks. "
           "Try increasing `gpu_memory_utilization` when initializing the engine.\n"
           "(EngineCore pid=6) INFO 12-06 22:56:51 [gpu_worker.py:857] Free memory on device (138.13/139.8 GiB) on "
           "startup. Desired GPU memory utilization is (0.9, 125.82 GiB). Actual usage is 2.32 GiB for weight\n"
           "I1206 22:56:52.0 12 model_lifecycle.cc:1] loading: vllm_engine:1\n"
           "E1206 22:56:53.0 12 model_lifecycle.cc:1] failed to load 'vllm_engine' version 1: Internal: RuntimeError: "
           "Engine core initialization failed. See root cause above.\n"
           "E1206 22:56:53.1 12 model_lifecycle.cc:1] failed to load 'vllm_engine'\n"
           "E1206 22:56:53.2 12 model_repository_manager.cc:1] | vllm_engine | 1 | UNAVAILABLE: Internal |\n"
           "E1206 22:56:53.3 12 main.cc:1] error: creating server: Internal - failed to load all models\n")
    lines = gc.error_lines(log, limit=3)
    assert lines[0].startswith("(EngineCore pid=7) ERROR") and "No available memory for the cache blocks" in lines[0]
    assert not any("INFO" in line for line in gc.error_lines(log))
    assert gc.error_lines("(EngineCore pid=6) INFO 12-06 22:56:51 [gpu_worker.py:857] Free memory on device\n") == []
