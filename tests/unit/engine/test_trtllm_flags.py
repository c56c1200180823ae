"""The gpu-trtllm build commands use only flags (and values) that upstream passes to TensorRT-LLM
0.17.0's `trtllm-build` and `examples/llama/convert_checkpoint.py` at tag v0.17.0: the stored extract
data/trtllm_v0.17.0_flags.toml says where each comes from."""
import re
import tomllib
from pathlib import Path

import pytest

from scripts.engine import config as engine
from scripts.profiles import load_profile

UPSTREAM = tomllib.loads((Path(__file__).parent / "data" / "trtllm_v0.17.0_flags.toml").read_text())


def problems(convert: list[str], build: list[str]) -> list[str]:
    """What in the two commands upstream v0.17.0 does not show: unknown flags, flags without a value,
    values of --gemm_plugin / --dtype it does not pass."""
    found = []
    for tool, words in (("convert_checkpoint", convert[2:]), ("trtllm-build", build[1:])):
        known, values = UPSTREAM[tool]["flags"], UPSTREAM[tool].get("values", {})
        for i, word in enumerate(words):
            if not word.startswith("--"):
                continue
            if word not in known:
                found.append(f"{tool} {word}: not among the flags upstream passes at v0.17.0")
            value = words[i + 1] if i + 1 < len(words) else None
            if value is None or value.startswith("--"):
                found.append(f"{tool} {word}: no value")
            elif word in values and value not in values[word]:
                found.append(f"{tool} {word} {value}: upstream passes only {sorted(values[word])}")
    return found


def test_the_extract_names_its_source():
    assert UPSTREAM["source"] == {"repository": "triton-inference-server/tensorrtllm_backend", "tag": "v0.17.0",
                                  "tensorrt_llm_commit": "350625cc1c0754882f764a6df5540e35caa48ef3"}
    for tool in ("trtllm-build", "convert_checkpoint"):
        for flag, where in UPSTREAM[tool]["flags"].items():
            assert flag.startswith("--") and re.fullmatch(r"[\w./-]+\.(md|sh):\d+", where), (flag, where)


@pytest.fixture
def gpu_profile(build_root, monkeypatch):
    monkeypatch.delenv("TRTLLM_EXAMPLES_DIR", raising=False)
    return load_profile("gpu-trtllm")


def test_the_build_commands_pass_only_what_upstream_v0_17_0_passes(gpu_profile):
    convert, build = engine.trtllm_build_commands(gpu_profile)
    assert convert[1].endswith("/examples/llama/convert_checkpoint.py") and build[0] == "trtllm-build"
    assert problems(convert, build) == []


def test_the_check_catches_a_flag_and_a_value_upstream_does_not_pass(gpu_profile):
    """A flag the extract does not list, a dtype spelled as no command at the tag spells it, a flag
    left without its value: each is reported."""
    convert, build = engine.trtllm_build_commands(gpu_profile)
    convert = [w if w != "float16" else "fp16" for w in convert]
    assert problems(convert, [*build, "--max_output_len", "32", "--gemm_plugin"]) == [
        "convert_checkpoint --dtype fp16: upstream passes only ['float16']",
        "trtllm-build --max_output_len: not among the flags upstream passes at v0.17.0",
        "trtllm-build --gemm_plugin: no value"]
