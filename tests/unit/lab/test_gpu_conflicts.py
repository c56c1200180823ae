"""scripts.lab.gpu_conflicts and scripts.lab.gpu_probe: what runs without a GPU, and one real
two-node Ray cluster whose second node hides CUDA."""
import subprocess
import sys

import pytest
import requests

from scripts.lab import gpu_conflicts as gc
from scripts.lab.gpu_probe import POLICIES, claim_engine_memory, visibility
from scripts.clients.serve_status import AppState, deploy_failed
from scripts.lab.serve_state import failure_reason
from scripts.profiles import load_profile

GOOD = dict(num_gpus=2, num_cpus=8, instance_count=8, engine_fraction=0.9, shared_model="LLAMA_3_1_8B",
            cpu_node_cpus=2, gpu_memory="24GiB")


def test_check_parameters_accepts_the_defaults_and_other_sensible_values():
    gc.check_parameters(**GOOD)
    gc.check_parameters(**GOOD | dict(num_gpus=3, num_cpus=4, instance_count=1, engine_fraction=0.5,
                                      shared_model="LLAMA_3_2_1B", cpu_node_cpus=1, gpu_memory="80GiB"))


@pytest.mark.parametrize("change, says", [
    (dict(num_gpus=0), "NUM_GPUS"), (dict(num_cpus=2), "NUM_CPUS >= 3"), (dict(instance_count=0), "INSTANCE_COUNT"),
    (dict(engine_fraction=1.0), "ENGINE_FRACTION"), (dict(engine_fraction=True), "ENGINE_FRACTION"),
    (dict(shared_model="GPT5"), "LLAMA_3_1_8B, LLAMA_3_2_1B"), (dict(cpu_node_cpus=0), "CPU_NODE_CPUS"),
    (dict(gpu_memory="lots"), "GPU_MEMORY"), (dict(gpu_memory="0GiB"), "GPU_MEMORY"), (dict(num_gpus=1.5), "NUM_GPUS"),
])
def test_check_parameters_refuses_values_the_notebook_cannot_use(change, says):
    with pytest.raises(ValueError, match=says):
        gc.check_parameters(**GOOD | change)


@pytest.mark.parametrize("gpus", [1, 2, 7, 8, 16])
def test_the_default_head_cpus_pass_the_check_on_any_gpu_count(gpus):
    # gpu.yml runs 06 with --gpus all: on an 8-GPU host the old fixed NUM_CPUS = 8 was refused (needs 9)
    cpus = gc.head_cpus(gpus)
    gc.check_parameters(**GOOD | dict(num_gpus=gpus, num_cpus=cpus))
    assert cpus == max(gc.HEAD_CPUS, gpus + 1)
    with pytest.raises(ValueError, match="NUM_CPUS"):
        gc.check_parameters(**GOOD | dict(num_gpus=gpus, num_cpus=gpus))


def test_gpu_skip_reason():
    assert "logical GPUs" in gc.gpu_skip_reason(load_profile("cpu"))
    gpu = load_profile("gpu-transformers")
    assert gc.gpu_skip_reason(gpu, smi=lambda: [{"index": 0}]) is None
    assert gc.gpu_skip_reason(gpu, smi=lambda: []) == "nvidia-smi lists no GPU"

    def missing():
        raise FileNotFoundError("nvidia-smi is not on PATH")
    assert "install the NVIDIA driver" in gc.gpu_skip_reason(gpu, smi=missing)


def test_smi_parsing(monkeypatch):
    outputs = {"gpu": "0, NVIDIA H200, GPU-abc, 143771, 512\n",
               "compute-apps": "123, 2048\n456, [N/A]\n"}
    from scripts.monitor import gpu as smi  # the one nvidia-smi wrapper, shared with the GPU sampler

    monkeypatch.setattr(smi.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(smi.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 0, outputs["gpu" if "--query-gpu" in argv[1] else "compute-apps"], ""))
    assert gc.gpu_memory() == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-abc", "total_bytes": 143771 * 2**20,
                                "used_bytes": 512 * 2**20}]
    assert gc.memory_by_pid() == {123: 2048 * 2**20}
    assert gc.gpu_free_bytes() == (143771 - 512) * 2**20
    with pytest.raises(ValueError, match="no GPU 1"):
        gc.gpu_free_bytes(1)


def test_error_lines_keep_the_reason_without_timestamps():
    log = ("I1203 10:00:00.1 12 server.cc:1] started\n"
           "E1203 10:00:01.2 12 model_lifecycle.cc:654] failed to load 'transformers_engine' version 1: "
           "Internal: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB\n"
           "E1203 10:00:01.2 12 model_lifecycle.cc:654] failed to load 'transformers_engine' version 1: "
           "Internal: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB\n")
    assert gc.error_lines(log) == ["failed to load 'transformers_engine' version 1: Internal: torch.OutOfMemoryError: "
                                   "CUDA out of memory. Tried to allocate 12.00 GiB"]


def test_triton_load_format():
    assert gc.TritonLoad(True, 1.0, [], [2**30, 3 * 2**30]).format().startswith(
        "Triton ready: 2 instance(s) on the GPU holding [1.0, 3.0] GiB (4.0 GiB in all)")
    assert gc.TritonLoad(True, 1.0).format() == "Triton ready (the model loaded)"
    assert gc.TritonLoad(False, 1.0, ["failed to load"]).format() == "Triton did not load the model:\n  failed to load"


def test_format_visibility():
    report = {"node_id": "n1" * 20, "ray_gpu_ids": ["0"], "CUDA_VISIBLE_DEVICES": "0", "cuda_available": True,
              "devices": [{"name": "NVIDIA H200", "uuid": "GPU-x"}], "claimed": {"held_bytes": 3 * 2**30},
              "triton": "Triton ready"}
    line = gc.format_visibility(report, {"n1" * 20: "head"})
    assert line.startswith("node head: CUDA_VISIBLE_DEVICES='0', Ray's GPU ids ['0'], torch.cuda.is_available() True")
    assert "NVIDIA H200 (GPU-x)" in line and "holds 3.0 GiB" in line and line.endswith("Triton: Triton ready")


def test_engine_only_repository_overrides_the_fraction(tmp_path, monkeypatch):
    import json
    profile = load_profile("gpu-transformers")
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "engine_config.json").write_text(json.dumps(
        {"engine": "transformers", "model_dir": "/m", "dtype": "bfloat16", "max_model_len": 64, "max_num_seqs": 4,
         "kv_cache_free_gpu_mem_fraction": 0.5, "device": "auto"}))
    monkeypatch.setattr(type(profile), "path", lambda self, key: engine)
    repo = gc.engine_only_repository(profile, tmp_path / "out", count=3, fraction=0.25)
    config = (repo / "transformers_engine" / "config.pbtxt").read_text()
    assert "count: 3 kind: KIND_GPU" in config and sorted(p.name for p in repo.iterdir()) == ["transformers_engine"]
    variant = json.loads((tmp_path / "out" / "engine" / "engine_config.json").read_text())
    assert variant["kv_cache_free_gpu_mem_fraction"] == 0.25 and variant["model_dir"] == "/m"
    assert f'"{tmp_path / "out" / "engine"}"' in config
    # TensorRT-LLM reads the fraction from its config.pbtxt parameter, not from an engine config copy
    trtllm = tmp_path / "trtllm"
    trtllm.mkdir()
    (trtllm / "engine_config.json").write_text(json.dumps({"engine": "tensorrt_llm", "engine_dir": str(trtllm),
                                                           "model_dir": "/m", "max_seq_len": 64, "dtype": "float16",
                                                           "max_model_len": 64}))
    monkeypatch.setattr(type(profile), "path", lambda self, key: trtllm)
    repo = gc.engine_only_repository(profile, tmp_path / "t", count=2, fraction=0.3)
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert "count: 2" in config and "0.3" in config and not (tmp_path / "t" / "engine").exists()
    with pytest.raises(ValueError, match="instance count"):
        gc.engine_only_repository(profile, tmp_path / "x", count=0)
    with pytest.raises(ValueError, match="within"):
        gc.engine_only_repository(profile, tmp_path / "x", count=1, fraction=1.0)


def test_claim_engine_memory_refuses_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        claim_engine_memory("half", 0.5, 0)
    with pytest.raises(ValueError, match="fraction"):
        claim_engine_memory(POLICIES[0], 1.5, 0)


def test_failure_reason_is_the_last_exception_line():
    message = ('The deployment failed to start 3 times in a row. Error: File "/x.py", line 3, in f raise X '
               'RuntimeError: Traceback File "/y.py", line 9 torch.OutOfMemoryError: CUDA out of memory. '
               'Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 139.80 GiB')
    assert failure_reason(message) == ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB. "
                                       "GPU 0 has a total capacity of 139.80 GiB")
    assert deploy_failed(AppState("a", "DEPLOY_FAILED", "d", "DEPLOY_FAILED"))
    assert not deploy_failed(AppState("a", "RUNNING", "d", "HEALTHY"))


class _Reply:
    def __init__(self, report):
        self.report = report

    def raise_for_status(self):
        pass

    def json(self):
        return self.report


def test_replica_reports_asks_again_when_a_draining_proxy_closes_the_connection(monkeypatch):
    # the first request lands on the proxy of a node without replicas, which Serve drains
    answers = iter([requests.ConnectionError("Remote end closed connection without response"),
                    {"replica": "b", "node_id": "n1"}, {"replica": "a", "node_id": "n1"}])

    def get(url, timeout):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return _Reply(answer)

    monkeypatch.setattr(requests, "get", get)
    reports = gc.replica_reports("http://127.0.0.1:1", "spread", 2, retry_s=0)
    assert [r["replica"] for r in reports] == ["a", "b"]


def test_replica_reports_gives_up_with_what_answered(monkeypatch):
    def get(url, timeout):
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(requests, "get", get)
    with pytest.raises(TimeoutError, match="only 0 of 1 replicas of 'spread' answered"):
        gc.replica_reports("http://127.0.0.1:1", "spread", 1, timeout_s=0.05, retry_s=0.01)
