"""docs/gpu-runs/README.md's tables of GPU records are what their committed files render, so no figure
there drifts from its record; a block that differs is named."""
import json

from scripts.bench import gpu_records as gr
from scripts.bench.readme_app import APP, PEER, label


def record():
    med = lambda who, tok, ttft, itl: {"label": label(who, "chat"), "concurrency": 32, "output_throughput": tok,
                                       "median_ttft_ms": ttft, "median_itl_ms": itl}
    return {"command": "python -m scripts.bench.readme_app", "gpu": "GPU X", "commit": "abcdef0123",
            "medians": [med(PEER, 8000.0, 110.0, 2.8), med(APP, 6000.0, 200.0, 0.05)],
            "ratios": [{"label": label(APP, "chat"), "concurrency": 32, "throughput_ratio": 0.75}]}


def test_a_record_renders_one_row_per_route_and_concurrency():
    table = gr.readme_app_table(record())
    assert table.startswith("`python -m scripts.bench.readme_app` on GPU X, main at abcdef0:")
    assert "| chat | 32 | 8,000 | 6,000 | 0.75 | 110 / 200 | 2.80 / 0.05 |" in table.splitlines()


def test_a_block_that_differs_from_its_record_is_named(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(record()))
    page = tmp_path / "README.md"
    page.write_text("text\n<!-- record: r.json -->\n| chat | 32 | 9,999 |\n<!-- /record -->\nmore\n")
    assert gr.stale_blocks(page) == ["r.json"]
    assert gr.main(["--page", str(page)]) == 0 and gr.stale_blocks(page) == []
    assert page.read_text().startswith("text\n<!-- record: r.json -->\n`python -m") and page.read_text().endswith("more\n")


def test_the_gpu_runs_page_shows_what_its_records_render():
    assert gr.BLOCK.search(gr.PAGE.read_text()), "docs/gpu-runs/README.md has no record block"
    assert gr.stale_blocks() == [], "run: python -m scripts.bench.gpu_records"
