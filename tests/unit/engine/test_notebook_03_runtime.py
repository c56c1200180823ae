"""Notebook 03's text names the TensorRT-LLM runtime that run.py actually runs by default."""
import json
import re
import sys

from scripts.engine import run
from scripts.paths import NOTEBOOK_DIR
from trtllm_fakes import make_modules


def markdown(name: str) -> str:
    cells = json.loads((NOTEBOOK_DIR / name).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_notebook_03_names_the_runtime_run_py_picks(monkeypatch):
    package, runtime, _ = make_modules()
    monkeypatch.setitem(sys.modules, "tensorrt_llm", package)
    monkeypatch.setitem(sys.modules, "tensorrt_llm.runtime", runtime)
    _, name = run.trtllm_runner_class(use_py_session=False)
    text = markdown("03_verify_engine.ipynb")
    assert name == "ModelRunnerCpp" and f"`{name}`" in text
    assert not re.search(r"`ModelRunner`", text), "the text names the Python runtime, which run.py does not use by default"
