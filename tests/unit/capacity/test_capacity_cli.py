"""scripts.capacity.cli: exit status, one-line errors, the Serve and the Triton checks from files."""
import json
import subprocess
import sys

import pytest
import yaml

from capacity_builders import app, dep, nodes
from scripts.capacity.cli import main
from scripts.capacity.instance_memory import max_safe_instance_count, safe_kv_fraction
from scripts.model.configs import LLAMA_3_2_1B

TRTLLM_ENGINE = {"engine": "tensorrt_llm", "dtype": "float16", "max_seq_len": 2048, "max_batch_size": 8}


@pytest.fixture
def files(tmp_path):
    def write(name, data):
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else
                        (json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data)))
        return str(path)
    return write


def test_cli_exit_0_when_everything_fits(files, capsys):
    rc = main(["--serve-config", files("serve.yaml", app(dep("T", 1, autoscale=(1, 2)))),
               "--cluster", files("cluster.yaml", nodes(2))])
    out = capsys.readouterr().out
    assert rc == 0 and "Result: OK" in out and "llm/T" in out


def test_cli_exit_1_when_something_cannot_fit(files, capsys):
    rc = main(["--serve-config", files("serve.yaml", app(dep("T", 1, autoscale=(1, 4)))),
               "--cluster", files("cluster.yaml", nodes(2))])
    out = capsys.readouterr().out
    assert rc == 1 and "[max_replicas] llm/T" in out and "lower autoscaling_config.max_replicas to 2" in out


def test_cli_triton_memory(files, capsys):
    args = ["--engine-config", files("engine_config.json", TRTLLM_ENGINE),
            "--model-config", files("config.json", LLAMA_3_2_1B), "--gpu-memory", "12GiB"]
    safe = max_safe_instance_count(TRTLLM_ENGINE, "12GiB", LLAMA_3_2_1B)
    assert main(args + ["--instance-count", str(safe)]) == 0
    assert f"largest safe count at fraction 0.9: {safe}" in capsys.readouterr().out
    assert main(args + ["--instance-count", str(safe + 1)]) == 1
    out = capsys.readouterr().out
    assert f"instance {safe + 1} of {safe + 1} runs out of GPU memory" in out
    assert f"lower instance_group count to {safe}" in out
    fraction = safe_kv_fraction(TRTLLM_ENGINE, 2, "12GiB", LLAMA_3_2_1B)
    assert main(args + ["--instance-count", "2", "--kv-cache-free-gpu-mem-fraction", str(fraction)]) == 0
    assert "Result: OK (all 2 instances load)" in capsys.readouterr().out


def test_cli_reads_the_model_config_named_by_the_engine_config(files, tmp_path, capsys):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_3_2_1B))
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    (engine_dir / "engine_config.json").write_text(json.dumps(TRTLLM_ENGINE | {"model_dir": str(model_dir)}))
    assert main(["--engine-config", str(engine_dir), "--gpu-memory", "80GiB"]) == 0
    assert "1.24 B parameters" in capsys.readouterr().out


@pytest.mark.parametrize("serve, cluster, message", [
    ("applications: [name: x\n", None, "is not valid YAML at line"),
    (app(dep("A", "one")), None, "num_gpus must be a number >= 0, got 'one'"),
    (None, {"nodes": [{"CPU": 4, "memory": "4 parsecs"}]}, "unknown memory unit 'parsecs'"),
    ("", None, "is empty"),
])
def test_cli_exit_2_for_malformed_input(files, capsys, serve, cluster, message):
    rc = main(["--serve-config", files("serve.yaml", app(dep("A")) if serve is None else serve),
               "--cluster", files("cluster.yaml", nodes(1) if cluster is None else cluster)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and message in captured.err
    assert "Traceback" not in captured.err


def test_cli_exit_2_for_missing_file_and_arguments(files, capsys, tmp_path):
    assert main(["--serve-config", str(tmp_path / "nope.yaml"), "--cluster", files("c.yaml", nodes(1))]) == 2
    assert "cannot read the Serve config" in capsys.readouterr().err
    assert main(["--serve-config", files("s.yaml", app(dep("A")))]) == 2
    assert "needs the cluster: --cluster FILE or --live" in capsys.readouterr().err
    engine_args = ["--engine-config", files("e.json", TRTLLM_ENGINE), "--model-config", files("m.json", LLAMA_3_2_1B)]
    assert main(engine_args) == 2
    assert "needs --gpu-memory" in capsys.readouterr().err
    assert main(engine_args + ["--gpu-memory", "24GiB", "--kv-cache-free-gpu-mem-fraction", "1.5"]) == 2
    assert "kv_cache_free_gpu_mem_fraction must be a number above 0 and below 1" in capsys.readouterr().err


def test_cli_as_a_module_prints_one_line_error(tmp_path):
    bad = tmp_path / "serve.yaml"
    bad.write_text("applications:\n- name: llm\n  deployments:\n  - name: T\n    ray_actor_options: {num_gpus: one}\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: a, CPU: 4, GPU: 1}]\n")
    command = [sys.executable, "-m", "scripts.capacity", "--serve-config", str(bad), "--cluster", str(cluster)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("error: applications[0].deployments[0].ray_actor_options.num_gpus "
                           "must be a number >= 0, got 'one'\n")


def test_cli_takes_the_engine_configs_fraction_and_the_parallel_worst_case(files, capsys):
    engine = {"engine": "transformers", "dtype": "bfloat16", "max_num_seqs": 64, "max_model_len": 2048,
              "kv_cache_free_gpu_mem_fraction": 0.5}
    args = ["--engine-config", files("engine_config.json", engine), "--model-config", files("config.json", LLAMA_3_2_1B),
            "--gpu-memory", "140GiB", "--instance-count", "8"]
    assert main(args) == 1
    sequential = capsys.readouterr().out
    assert "0.5 of the GPU memory still free" in sequential and "loading in parallel" not in sequential
    assert main(args + ["--parallel-loading"]) == 1
    parallel = capsys.readouterr().out
    assert "loading in parallel" in parallel and "Result: MAY FAIL" in parallel
