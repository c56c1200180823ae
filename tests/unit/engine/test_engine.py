import json
import shlex

import pytest

from scripts.engine import config as engine
from scripts.engine.config import EngineConfigError
from scripts.profiles import load_profile


def test_cpu_engine_settings(build_root):
    s = engine.engine_settings(load_profile("cpu"))
    assert s["engine"] == "vllm" and s["dtype"] == "bfloat16"
    assert s["model_dir"] == str(build_root / "models" / "tiny-llama")
    assert s["max_model_len"] == 512 and s["max_num_seqs"] == 64 and s["kv_cache_space_gib"] == 1


def test_write_then_read_round_trip(build_root):
    path = engine.write_engine_config(load_profile("cpu"))
    assert path == build_root / "engine" / "vllm" / "engine_config.json"
    assert engine.read_engine_config(path.parent) == json.loads(path.read_text())


def test_read_missing_dir_says_to_build(tmp_path):
    with pytest.raises(EngineConfigError, match="does not exist: build the engine first.*01_build_engine"):
        engine.read_engine_config(tmp_path / "nope")


def test_read_dir_without_config(tmp_path):
    with pytest.raises(EngineConfigError, match="holds no engine_config.json"):
        engine.read_engine_config(tmp_path)


def test_read_invalid_json(tmp_path):
    (tmp_path / "engine_config.json").write_text("{not json")
    with pytest.raises(EngineConfigError, match="not valid JSON"):
        engine.read_engine_config(tmp_path)


def test_read_bad_dtype(tmp_path):
    (tmp_path / "engine_config.json").write_text(json.dumps(
        {"engine": "vllm", "dtype": "float64", "model_dir": "m", "max_model_len": 8}))
    with pytest.raises(EngineConfigError, match="dtype 'float64' is not supported by vllm"):
        engine.read_engine_config(tmp_path)


def test_read_missing_key(tmp_path):
    (tmp_path / "engine_config.json").write_text(json.dumps({"engine": "vllm", "dtype": "bfloat16"}))
    with pytest.raises(EngineConfigError, match="lacks 'model_dir'"):
        engine.read_engine_config(tmp_path)


def test_bare_trtllm_build_output_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "rank0.engine").write_bytes(b"")
    assert engine.read_engine_config(tmp_path)["engine"] == "tensorrt_llm"


def test_vllm_kwargs_and_environment():
    config = {"engine": "vllm", "model_dir": "/m", "dtype": "bfloat16", "max_model_len": 512,
              "max_num_seqs": 8, "kv_cache_space_gib": 2, "seed": 0, "enforce_eager": True}
    kw = engine.vllm_engine_kwargs(config)
    assert kw == {"model": "/m", "tokenizer": "/m", "dtype": "bfloat16", "max_model_len": 512,
                  "max_num_seqs": 8, "tensor_parallel_size": 1, "seed": 0, "enforce_eager": True}
    env = engine.vllm_environment(config)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["HF_HUB_OFFLINE"] == "1"


def test_trtllm_commands_follow_the_llama_guide(build_root, monkeypatch):
    monkeypatch.setenv("LLAMA_MODEL_DIR", "/models/llama")
    monkeypatch.setenv("TRTLLM_EXAMPLES_DIR", "/opt/trtllm/examples")
    profile = load_profile("gpu-trtllm")
    convert, build = engine.trtllm_build_commands(profile)
    assert convert[:2] == ["python3", "/opt/trtllm/examples/llama/convert_checkpoint.py"]
    c = shlex.join(convert)
    assert "--model_dir /models/llama" in c and "--dtype float16" in c and "--tp_size 1" in c
    assert f"--output_dir {build_root}/engine/trtllm_ckpt" in c
    b = shlex.join(build)
    assert build[0] == "trtllm-build"
    assert f"--checkpoint_dir {build_root}/engine/trtllm_ckpt" in b
    assert f"--output_dir {build_root}/engine/trtllm" in b
    assert "--gemm_plugin auto" in b and f"--max_batch_size {profile['max_batch_size']}" in b


def test_gpu_build_without_tensorrt_llm_says_where_to_run(build_root, monkeypatch):
    monkeypatch.setattr(engine, "tensorrt_llm_available", lambda: False)
    with pytest.raises(EngineConfigError, match="tensorrt_llm is not importable.*NGC container.*PROFILE='cpu'"):
        engine.build_engine(load_profile("gpu-trtllm"))


def test_gpu_dry_run_lists_commands_and_writes_config(build_root):
    out = engine.build_engine(load_profile("gpu-trtllm"), dry_run=True)
    assert out["commands"][1].startswith("trtllm-build ")
    cfg = engine.read_engine_config(build_root / "engine" / "trtllm")
    assert cfg["engine"] == "tensorrt_llm" and cfg["dtype"] == "float16"


def test_cpu_build_writes_config(build_root):
    out = engine.build_engine(load_profile("cpu"))
    assert "commands" not in out
    assert engine.read_engine_config(build_root / "engine" / "vllm")["engine"] == "vllm"


def test_cli_reports_errors_without_traceback(build_root, monkeypatch, capsys):
    monkeypatch.setattr(engine, "tensorrt_llm_available", lambda: False)
    assert engine.main(["--profile", "gpu-trtllm"]) == 2
    assert capsys.readouterr().err.startswith("error: tensorrt_llm is not importable")
    assert engine.main(["--profile", "nope"]) == 2


def test_gpu_build_without_the_examples_says_where_to_get_them(build_root, monkeypatch, tmp_path):
    """The NGC image has no TensorRT-LLM examples/ (server@r25.02:build.py): the error names the clone."""
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("LLAMA_MODEL_DIR", str(model))
    monkeypatch.setenv("TRTLLM_EXAMPLES_DIR", str(tmp_path / "no-examples"))
    monkeypatch.setattr(engine, "tensorrt_llm_available", lambda: True)
    ran = []
    monkeypatch.setattr(engine.subprocess, "run", lambda *a, **k: ran.append(a))
    with pytest.raises(EngineConfigError, match=r"convert_checkpoint.py is missing.*--branch v0.17.0.*TRTLLM_EXAMPLES_DIR"):
        engine.build_engine(load_profile("gpu-trtllm"))
    assert ran == []
