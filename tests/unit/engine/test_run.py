import json
import sys

import pytest

from scripts.engine import config as engine

from scripts.engine import run
from scripts.engine.config import EngineConfigError
from scripts.profiles import load_profile
from scripts.engine.run import RunError
from scripts.model.tiny_llama import TinyLlamaSpec, train_tokenizer


@pytest.fixture
def engine_dir(build_root):
    """A cpu engine directory whose tokenizer exists (no weights needed: validation stops before the engine)."""
    profile = load_profile("cpu")
    train_tokenizer(TinyLlamaSpec()).save_pretrained(profile.path("model_dir"))
    return engine.write_engine_config(profile).parent


def args(*argv):
    return run.build_parser().parse_args(list(argv))


def test_valid_arguments_return_the_config(engine_dir):
    config = run.validate(args("--engine_dir", str(engine_dir), "--input_text", "Hello", "--max_output_len", "8"))
    assert config["engine"] == "vllm"


def test_missing_engine_dir(tmp_path):
    with pytest.raises(EngineConfigError, match="does not exist: build the engine first"):
        run.validate(args("--engine_dir", str(tmp_path / "missing"), "--input_text", "Hi"))


def test_bad_dtype(engine_dir):
    with pytest.raises(RunError, match="--dtype 'float64' is not a dtype: use one of bfloat16, float16, float32"):
        run.validate(args("--engine_dir", str(engine_dir), "--dtype", "float64", "--input_text", "Hi"))


def test_dtype_override(engine_dir):
    config = run.validate(args("--engine_dir", str(engine_dir), "--dtype", "float32", "--input_text", "Hi"))
    assert config["dtype"] == "float32"


@pytest.mark.parametrize("prompt", ["", "   ", "\n"])
def test_empty_prompt(engine_dir, prompt):
    with pytest.raises(RunError, match="--input_text #1 is empty"):
        run.validate(args("--engine_dir", str(engine_dir), "--input_text", "ok", prompt))


@pytest.mark.parametrize("n", ["0", "-3"])
def test_non_positive_output_len(engine_dir, n):
    with pytest.raises(RunError, match="must be a positive number of tokens"):
        run.validate(args("--engine_dir", str(engine_dir), "--max_output_len", n, "--input_text", "Hi"))


def test_output_len_beyond_model_len(engine_dir):
    with pytest.raises(RunError, match="leaves no room for the prompt: the engine's max_model_len is 512"):
        run.validate(args("--engine_dir", str(engine_dir), "--max_output_len", "512", "--input_text", "Hi"))


def test_prompt_too_long(engine_dir):
    with pytest.raises(RunError, match=r"--input_text #0 has \d+ tokens.*at most 480 fit.*shorten it"):
        run.validate(args("--engine_dir", str(engine_dir), "--max_output_len", "32", "--input_text", "Triton " * 600))


def test_bad_tokenizer_dir(engine_dir, tmp_path):
    with pytest.raises(RunError, match="holds no tokenizer_config.json"):
        run.validate(args("--engine_dir", str(engine_dir), "--tokenizer_dir", str(tmp_path), "--input_text", "Hi"))


def test_main_prints_error_and_exits_2(tmp_path, capsys):
    assert run.main(["--engine_dir", str(tmp_path / "missing"), "--input_text", "Hi"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: engine directory") and "Traceback" not in err


def test_main_requires_input_text(engine_dir):
    with pytest.raises(SystemExit) as exc:
        run.main(["--engine_dir", str(engine_dir)])
    assert exc.value.code == 2


def test_main_writes_reference_json(engine_dir, tmp_path, monkeypatch, capsys):
    fake = [{"input_text": "Hi", "input_ids": [0, 5], "output_ids": [7, 1], "output_text": " there", "finish_reason": "stop"}]
    monkeypatch.setattr(run, "generate_vllm", lambda config, prompts, n, ignore_eos: fake)
    out = tmp_path / "ref" / "r.json"
    assert run.main(["--engine_dir", str(engine_dir), "--output_json", str(out), "--input_text", "Hi"]) == 0
    bos = run.load_tokenizer(engine.read_engine_config(engine_dir)).bos_token_id
    assert json.loads(out.read_text()) == {"max_output_len": 32, "engine": "vllm", "runtime": "vllm.LLM",
                                           "bos_token_id": bos, "results": fake}
    assert capsys.readouterr().out == 'Input [Text 0]: "Hi"\nOutput [Text 0 Beam 0]: " there"\n'


def test_use_py_session_is_accepted_and_ignored_by_vllm(engine_dir, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(run, "generate_vllm", lambda config, prompts, n, ignore_eos: seen.append(prompts) or [])
    out = tmp_path / "r.json"
    assert run.main(["--engine_dir", str(engine_dir), "--use_py_session", "--output_json", str(out), "--input_text", "Hi"]) == 0
    assert seen == [["Hi"]] and json.loads(out.read_text())["runtime"] == "vllm.LLM"


def test_cli_command_and_display(tmp_path):
    cmd = run.cli_command(tmp_path / "e", ["a b", "c"], 16, output_json=tmp_path / "o.json", extra=["--dtype", "float32"])
    assert cmd[:3] == [sys.executable, "-m", "scripts.engine.run"]
    assert cmd[-3:] == ["--input_text", "a b", "c"]
    assert cmd[cmd.index("--output_json") + 1] == str(tmp_path / "o.json")
    shown = run.show_command(cmd)
    assert shown.startswith("python -m scripts.engine.run --engine_dir ") and shown.endswith("--input_text 'a b' c")


def test_run_and_show_prints_output_and_the_error_tail(capsys):
    proc, elapsed = run.run_and_show([sys.executable, "-c", "print('made it')"], timeout=30)
    assert proc.returncode == 0 and elapsed > 0 and "made it" in capsys.readouterr().out
    proc, _ = run.run_and_show([sys.executable, "-c", "import sys; sys.exit('what went wrong')"], timeout=30)
    assert proc.returncode == 1 and "what went wrong" in capsys.readouterr().out
