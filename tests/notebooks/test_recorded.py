"""Assert the key values the notebooks' check cells recorded (run after `pytest --nbval notebooks`)."""
import json
from pathlib import Path

from scripts import results
from scripts.engine.config import read_engine_config
from scripts.paths import reference_path


def test_00_model_made():
    r = results.load("00_check_environment")
    assert r["tritonserver"] == "2.51.0" and r["python"].startswith("3.11.")
    assert r["architecture"] == "LlamaForCausalLM"
    model_dir = Path(r["model_dir"])
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file()
    if r["profile"] == "cpu":
        assert 300_000 < r["parameters"] < 2_000_000 and r["vocab_size"] <= 2048


def test_01_engine_config_readable():
    r = results.load("01_build_engine")
    config = read_engine_config(Path(r["engine_config"]).parent)
    assert config["engine"] == r["engine"] and r["check_output"].strip()


def test_03_reference_saved():
    r = results.load("03_verify_engine")
    ref = json.loads(reference_path().read_text())
    assert len(ref["results"]) == r["prompts"] == 5
    assert [len(x["output_ids"]) for x in ref["results"]] == r["output_lengths"]
    for x in ref["results"]:
        assert 0 < len(x["output_ids"]) <= ref["max_output_len"] == 32
        assert x["output_text"].strip()
    if results.load("00_check_environment")["profile"] == "cpu":
        # the tiny Llama recites its corpus: the first reference continues a corpus sentence
        assert ref["results"][0]["output_text"].startswith(" the traffic, balances it, scales the replicas")


def test_02_repository_filled_and_clean():
    from scripts.triton.repository.lint import lint

    r = results.load("02_fill_model_repository")
    assert not lint(r["repository"])
    assert {"preprocessing", "postprocessing", "ensemble", "tensorrt_llm_bls"} <= set(r["models"])
    assert r["triton_max_batch_size"] == 4 and r["decoupled_mode"] is False


def test_04_triton_reproduced_the_reference_and_served_the_burst():
    r = results.load("04_launch_triton_server")
    assert r["greedy_text_equal"] and r["grpc_ids_equal"]
    bench = r["bench"]
    assert bench["triton"]["succeeded"] == bench["triton"]["requests"] == 64
    assert bench["triton"]["tok_per_s"] > 0 and bench["offline"]["tok_per_s"] > 0


def test_05_serve_reproduced_the_reference_scaled_and_served_the_benchmark():
    r = results.load("05_serve_with_ray")
    assert r["capacity_ok"] and r["greedy_text_equal"]
    assert set(r["bad_status"].values()) <= {400, 404} and len(r["bad_status"]) == 9
    assert r["burst"]["error_count"] == 0 and r["burst"]["succeeded"] > 0
    assert r["upscale_s"] > 0 and r["downscale_s"] > 0
    bench = r["bench"]
    if r["mode"] == "managed process":  # in-process Triton has no port to benchmark directly
        assert bench["serve"]["succeeded"] == bench["serve"]["requests"] == 200 and not bench["serve"]["errors"]
        assert bench["triton"]["succeeded"] == 200 and bench["same_text"] == 200
        assert bench["concurrency"] == 32 and 0 < bench["ratio"]


def test_06_conflicts_reproduced_and_fixed():
    r = results.load("06_troubleshoot_gpu_resources")
    gpus = r["gpus"]
    assert gpus >= 1
    assert r["findings"] == {"1": ["unschedulable_replica"], "2": ["max_replicas"], "3": ["min_replicas"],
                             "4": ["missing_resource"]}
    pending = r["pending"]
    assert set(pending) == {"1_pending", "2_pending", "3_pending", "4_pending"}
    assert pending["2_pending"].get("RUNNING") == gpus and pending["2_pending"].get("STARTING") == 1
    for key in ("1_pending", "3_pending", "4_pending"):
        assert pending[key] == {"STARTING": 1}
    for message in r["serve_messages"].values():
        assert "to be scheduled" in message and "Resources required for each replica" in message
    running = r["running"]
    assert running["2_fixed"] == running["3_holder"] == running["3_fixed_holder"] == gpus
    assert running["1_fixed"] == running["1_placement_group"] == running["4_fixed"] == 1
    assert running["override_too_big"] == running["override_picky"] == 1
    assert 1 <= r["max_safe_instance_count"] < r["instance_count"]
    assert r["max_safe_instance_count_shared"] <= r["max_safe_instance_count"] // 2
