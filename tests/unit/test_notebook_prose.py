"""A figure the run measures never stands in a notebook's markdown (CONTRIBUTING.md, "Notebooks a
reader finishes"): the code prints it, or renders the sentence from the values
(``IPython.display.Markdown``). Prose that quotes a time, a rate, a ratio or a size goes stale on the
next run, on another machine, or on a GPU, and then contradicts the output under it.

Checked on the committed notebooks without running them: every figure with a unit (ms, s, minutes,
tok/s, req/s, GiB, GB, MB, KB, %, a ``3x``/``×`` factor, "N times faster") and every decimal in a
sentence about a ratio or a share, outside code spans and code blocks, must be in ``ALLOWED``: a
constant (a setting quoted from ``env/profiles.toml``, a documented default of Ray, Serve or Triton, a
constant of the code), each with the reason it is one. A qualifier such as "about" belongs to the
figure, so "about 10 s" (a measurement) is not allowed by "10 s" (a setting).
"""
from __future__ import annotations

import json
import re

import pytest

from scripts.paths import NOTEBOOK_DIR

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))

QUALIFIER = r"(?:(?i:about|around|roughly|nearly|almost|under|over|up to|at most|at least|some|~)\s*)?"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
UNIT = (r"(?:ms|µs|us|ns|s|sec|seconds?|minutes?|min|hours?|tok/s|tokens/s|tokens per second|req/s|requests/s|"
        r"requests per second|GiB|GB|MiB|MB|KiB|KB|kB|TiB|TB|%|x|×)")
FIGURE = re.compile(rf"(?<![\w.$/-]){QUALIFIER}{NUMBER}(?:\s?(?:-|–|to)\s?{NUMBER})?\s?"
                    rf"(?:(?:output|input|generated)\s)?{UNIT}(?![\w/])"
                    rf"|(?<![\w.$/-]){QUALIFIER}{NUMBER}\s(?:times|fold)\s(?:faster|slower|more|less|fewer|as)\b")
RATIO_SENTENCE = re.compile(r"\b(?:ratio|share|fraction of|as fast|as much)\b", re.I)
DECIMAL = re.compile(rf"(?<![\w.$/-]){QUALIFIER}\d+\.\d+(?![\w.])")

#: (notebook, figure as written): why it is a constant, not a measurement.
ALLOWED: dict[tuple[str, str], str] = {
    ("04_launch_triton_server", "90 %"): "kv_cache_free_gpu_mem_fraction's default 0.9 (tensorrtllm_backend v0.17.0)",
    ("05_serve_with_ray", "30 s"): "Serve's default look_back_period_s (ray 2.60)",
    ("05_serve_with_ray", "2 s"): "serve_health_check_period_s of the cpu profile (env/profiles.toml)",
    ("05_serve_with_ray", "10 s"): "Serve's default health_check_period_s (ray 2.60)",
    ("06_troubleshoot_gpu_resources", "20 s"): "Serve's default graceful_shutdown_timeout_s (ray 2.60)",
    ("06_troubleshoot_gpu_resources", "1 s"): "the graceful_shutdown_timeout_s the notebook's deployments set",
    ("06_troubleshoot_gpu_resources", "600 s"): "Serve's default downscale_delay_s (ray 2.60)",
    ("06_troubleshoot_gpu_resources", "1 %"): "the probe replica's claim, fraction 0.01 in the cell below it",
    ("06_troubleshoot_gpu_resources", "90 %"): "the engines' default KV-cache fraction 0.9 (TensorRT-LLM, transformers)",
    ("06_troubleshoot_gpu_resources", "10 %"): "the activation share of scripts/capacity/instance_size.py's estimate (a constant)",
    ("06_troubleshoot_gpu_resources", "512 MiB"): "the workspace term of scripts/capacity/instance_size.py's estimate (a constant)",
    ("06_troubleshoot_gpu_resources", "2 x"): "the K and V factor of the KV-cache formula",
    ("06_troubleshoot_gpu_resources", "0.5"): "num_gpus: 0.5, the setting section 6 deploys with",
    ("06_troubleshoot_gpu_resources", "0.45"): "an example gpu_memory_utilization for num_gpus: 0.5 (a setting)",
    ("07_benchmark_and_monitor", "up to 10 ms"): "the same setting, as the dynamic batcher's longest hold",
    ("07_benchmark_and_monitor", "30 s"): "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S's default (ray 2.60)",
    ("07_benchmark_and_monitor", "1 s"): "what DIRECT_INGRESS_ENV (scripts/lab/serve_state.py) sets it to",
}


def strip_code(markdown: str) -> str:
    """Markdown without fenced blocks and inline code spans: a setting quoted as code is not prose."""
    markdown = re.sub(r"^( {0,3})(```|~~~).*?^\1\2[^\n]*$", "", markdown, flags=re.S | re.M)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", markdown, flags=re.S)


def figures(markdown: str) -> list[str]:
    """Every figure with a unit, and every decimal in a sentence about a ratio or a share."""
    prose = strip_code(markdown)
    found = [" ".join(m.group().split()) for m in FIGURE.finditer(prose)]
    for sentence in re.split(r"(?<=[.!?:])\s+(?=[A-Z*(])", prose):
        if RATIO_SENTENCE.search(sentence):
            found += [" ".join(m.group().split()) for m in DECIMAL.finditer(sentence)]
    return found


def markdown_figures(path) -> dict[int, list[str]]:
    cells = json.loads(path.read_text())["cells"]
    return {i: f for i, cell in enumerate(cells) if cell["cell_type"] == "markdown" and (f := figures("".join(cell["source"])))}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_measured_figure_in_markdown(path):
    found = {i: stray for i, got in markdown_figures(path).items()
             if (stray := [f for f in got if (path.stem, f) not in ALLOWED])}
    assert not found, (f"{path.name}: figures in markdown (cell index: figures); print them from the code or render the "
                       f"sentence from the values, or add a constant to ALLOWED with its reason: {found}")


def test_every_allowed_figure_is_still_used():
    used = {(path.stem, f) for path in NOTEBOOKS for got in markdown_figures(path).values() for f in got}
    assert not set(ALLOWED) - used, f"stale entries of ALLOWED: {sorted(set(ALLOWED) - used)}"


def test_the_check_finds_figures_and_leaves_code_alone():
    assert figures("TTFT p50 22 ms with 10,000 µs, 11 ms with 0") == ["22 ms", "10,000 µs", "11 ms"]
    assert figures("about 370 output tok/s against 750, 3x faster, 2.5 times faster, 1.5 GiB") == [
        "about 370 output tok/s", "3x", "2.5 times faster", "1.5 GiB"]
    assert figures("About 4 minutes on two cores; 20-30 s at the default; 90 % of it") == [
        "About 4 minutes", "20-30 s", "90 %"]
    assert figures("The ratio moves (between about 0.3 and 0.8 in our runs). Serve at 0.48 of it.") == [
        "about 0.3", "0.8"]
    assert figures("`max_queue_delay_microseconds: 10000` and\n```\nsleep 5 s\n```\nnotebook 05, ray 2.60, Llama-3.2-1B") == []


#: The most markdown words (whitespace-separated tokens over the markdown cells' source) a notebook may
#: carry (issue 32): the main path stays in the notebook, deep dives live in docs/ pages it links.
MARKDOWN_WORD_BUDGET = 1_300


def markdown_words(path) -> int:
    cells = json.loads(path.read_text())["cells"]
    return sum(len("".join(cell["source"]).split()) for cell in cells if cell["cell_type"] == "markdown")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_stays_within_the_reading_budget(path):
    words = markdown_words(path)
    assert words <= MARKDOWN_WORD_BUDGET, (f"{path.name}: {words} markdown words, over the budget of "
                                           f"{MARKDOWN_WORD_BUDGET}; move a deep dive to a docs/ page and link it")
