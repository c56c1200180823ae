"""scripts.bench.compare: medians over repeats, ratios to a baseline, tables, files and plots."""
from __future__ import annotations

import csv
import json
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from fakes import embedded_png_bytes  # noqa: E402
from scripts.bench.compare import (METRICS, Table, aggregate, plot, ratio_range_sentence, ratio_sentences,  # noqa: E402
                                   ratios, save, side_by_side, table, versus_sentences)


def row(label, concurrency, repeat=0, tput=100.0, ttft=10.0, itl=5.0, e2el=50.0, completed=8, failed=0, **more):
    out = {"label": label, "concurrency": concurrency, "repeat": repeat, "completed": completed, "failed": failed,
           "output_throughput": tput, "request_throughput": tput / 10, "median_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft,
           "median_itl_ms": itl, "p99_itl_ms": 2 * itl, "median_e2el_ms": e2el, "p99_e2el_ms": 2 * e2el}
    return out | more


def by_key(rows):
    return {(r["label"], r["concurrency"]): r for r in rows}


def test_aggregate_takes_medians_over_repeats_and_keeps_the_throughput_spread():
    rows = [row("vllm", 1, 0, tput=90.0, ttft=12.0), row("vllm", 1, 1, tput=110.0, ttft=8.0),
            row("vllm", 1, 2, tput=100.0, ttft=30.0, failed=2, completed=6),
            row("serve", 1, 0, tput=50.0), row("vllm", 4, 0, tput=300.0)]
    agg = aggregate(rows)
    assert [(r["label"], r["concurrency"]) for r in agg] == [("vllm", 1), ("serve", 1), ("vllm", 4)]  # first-seen order
    vllm = by_key(agg)["vllm", 1]
    assert vllm["repeats"] == 3 and vllm["completed"] == 22 and vllm["failed"] == 2
    assert vllm["output_throughput"] == 100.0 and vllm["median_ttft_ms"] == 12.0 and vllm["p99_ttft_ms"] == 24.0
    assert (vllm["throughput_min"], vllm["throughput_max"]) == (90.0, 110.0)
    assert set(METRICS) <= set(vllm)
    assert by_key(agg)["vllm", 4]["throughput_min"] == by_key(agg)["vllm", 4]["throughput_max"] == 300.0
    # concurrency read as an int: a "4" (from a CSV) groups with 4
    assert len(aggregate([row("x", 4), row("x", "4")])) == 1


def test_aggregate_leaves_out_missing_numbers():
    failed_run = row("serve", 2, 1, completed=0, failed=8) | {m: None for m in METRICS}
    nan_run = row("serve", 2, 2, ttft=float("nan"), itl=float("nan"), tput=float("nan"))
    agg = aggregate([row("serve", 2, 0, tput=80.0, ttft=20.0), failed_run, nan_run])
    (serve,) = agg
    assert serve["failed"] == 8 and serve["completed"] == 16 and serve["repeats"] == 3
    assert serve["median_ttft_ms"] == 20.0  # only the run that has one
    assert serve["median_itl_ms"] == 5.0
    assert serve["output_throughput"] == 80.0
    # a run without a throughput counts as 0 in the spread, whatever the order of the repeats
    assert (serve["throughput_min"], serve["throughput_max"]) == (0.0, 80.0)
    agg_reversed = aggregate([nan_run, failed_run, row("serve", 2, 0, tput=80.0, ttft=20.0)])
    assert (agg_reversed[0]["throughput_min"], agg_reversed[0]["throughput_max"]) == (0.0, 80.0)
    (nothing,) = aggregate([failed_run])
    assert all(math.isnan(nothing[m]) for m in METRICS)
    assert (nothing["throughput_min"], nothing["throughput_max"]) == (0.0, 0.0)


def test_ratios_set_every_target_against_the_baseline_at_the_same_concurrency():
    agg = aggregate([row("vllm", 1, tput=100.0, ttft=10.0, itl=5.0, e2el=50.0),
                     row("serve", 1, tput=80.0, ttft=14.0, itl=6.5, e2el=62.0, failed=1),
                     row("vllm", 4, tput=0.0),
                     row("serve", 4, tput=200.0),
                     row("serve", 8, tput=300.0)])  # no baseline at 8: left out
    out = by_key(ratios(agg, "vllm"))
    assert set(out) == {("vllm", 1), ("serve", 1), ("vllm", 4), ("serve", 4)}
    assert out["vllm", 1] == {"label": "vllm", "concurrency": 1, "throughput_ratio": 1.0, "ttft_p50_delta_ms": 0.0,
                              "overhead_per_request_ms": 0.0, "overhead_per_token_ms": 0.0, "failed": 0}
    serve = out["serve", 1]
    assert serve["throughput_ratio"] == pytest.approx(0.8)
    assert serve["ttft_p50_delta_ms"] == pytest.approx(4.0)
    assert serve["overhead_per_request_ms"] == pytest.approx(12.0)
    assert serve["overhead_per_token_ms"] == pytest.approx(1.5)
    assert serve["failed"] == 1
    assert math.isnan(out["serve", 4]["throughput_ratio"])  # the baseline made nothing


def test_ratios_without_the_baseline_raise():
    with pytest.raises(ValueError, match=r"no rows for the baseline 'vllm'; labels: \['serve', 'triton'\]"):
        ratios(aggregate([row("serve", 1), row("triton", 1)]), "vllm")
    with pytest.raises(ValueError, match="no rows for the baseline"):
        ratios([], "vllm")


def test_table_rounds_numbers_and_aligns_columns():
    rows = [{"label": "vllm", "concurrency": 1, "tput": 100.0}, {"label": "serve-long", "concurrency": 16,
                                                                 "tput": float("nan")}]
    text = table(rows, ["label", "concurrency", "tput", "missing"], digits=1)
    assert text.splitlines() == [
        "label       concurrency  tput   missing",
        "----------  -----------  -----  -------",
        "vllm                  1  100.0         ",
        "serve-long           16    nan         ",
    ]
    assert table(rows, ["tput"]).splitlines()[2:] == ["100.00", "nan   "]  # the first column is left-aligned
    assert table([], ["a", "bb"]).splitlines() == ["a  bb", "-  --"]


def test_save_writes_json_and_csv_that_read_back(tmp_path):
    rows = [row("vllm", 1, errors=["boom"]), row("serve", 4, tput=12.5, note="x")]
    paths = save(rows, tmp_path / "out" / "deep", "sweep", meta={"model": "tiny-llama", "path": tmp_path})
    assert paths == {"json": tmp_path / "out" / "deep" / "sweep.json", "csv": tmp_path / "out" / "deep" / "sweep.csv"}
    data = json.loads(paths["json"].read_text())
    assert data["meta"] == {"model": "tiny-llama", "path": str(tmp_path)}
    assert data["rows"] == rows
    with paths["csv"].open(newline="") as f:
        reader = csv.DictReader(f)
        back = list(reader)
    assert reader.fieldnames == sorted(set(rows[0]) - {"errors"} | {"note"})  # lists stay in the JSON only
    assert [(r["label"], int(r["concurrency"]), float(r["output_throughput"])) for r in back] == [
        ("vllm", 1, 100.0), ("serve", 4, 12.5)]
    assert back[0]["note"] == "" and back[1]["note"] == "x"
    assert json.loads(save([], tmp_path, "empty")["json"].read_text()) == {"meta": {}, "rows": []}


def test_plot_has_two_axes_and_one_line_per_label():
    import matplotlib.pyplot as plt

    agg = aggregate([row("vllm", c, r, tput=100.0 * c + r) for c in (1, 4, 2) for r in (0, 1)]
                    + [row("serve", c, tput=80.0 * c) for c in (1, 2, 4)])
    fig = plot(agg, title="tiny-llama")
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        left, right = fig.axes
        assert len(left.containers) == 2 and len(right.get_lines()) == 2
        (legend,) = fig.legends  # one legend for both plots, outside both axes: it covers no line
        assert [t.get_text() for t in legend.get_texts()] == ["vllm", "serve"]
        assert left.get_legend() is None and right.get_legend() is None
        fig.canvas.draw()
        box = legend.get_window_extent()
        assert all(not box.overlaps(ax.get_window_extent()) for ax in (left, right))
        xs, ys = right.get_lines()[0].get_data()
        assert list(xs) == [1, 2, 4]  # sorted by concurrency
        assert list(left.containers[0].lines[0].get_ydata()) == [100.5, 200.5, 400.5]
        assert left.get_xscale() == "log" and right.get_yscale() == "log"
        assert fig.get_suptitle() == "tiny-llama"
    finally:
        plt.close(fig)


def test_table_orders_rows_by_the_sort_columns():
    rows = [{"label": "b", "concurrency": 8}, {"label": "a", "concurrency": 8}, {"label": "c", "concurrency": 1}]
    lines = table(rows, ["label", "concurrency"], sort_by=("concurrency", "label")).splitlines()[2:]
    assert [line.split()[0] for line in lines] == ["c", "a", "b"]
    assert [line.split()[0] for line in table(rows, ["label"]).splitlines()[2:]] == ["b", "a", "c"]


def test_ratio_sentences_are_rendered_from_the_rows():
    agg = aggregate([row("vllm", 1, tput=100.0, ttft=10.0, itl=5.0), row("serve", 1, tput=80.0, ttft=14.0),
                     row("vllm", 32, tput=1000.0, ttft=1600.0, itl=260.0), row("serve", 32, tput=1000.0, ttft=1650.0)])
    sentences = ratio_sentences(ratios(agg, "vllm"), agg, "serve", "vllm", other={32: 0.39}, other_name="with the tiny model")
    assert sentences == [
        "At concurrency 1, serve delivered 0.80 of vllm's output tokens per second; its first token came +4 ms from "
        "vllm's (median 10 ms), and a streamed chunk took 5 ms to come (median, vllm).",
        "At concurrency 32, serve delivered 1.00 of vllm's output tokens per second (0.39 with the tiny model); its first "
        "token came +50 ms from vllm's (median 1600 ms), and a streamed chunk took 260 ms to come (median, vllm)."]
    with pytest.raises(ValueError, match="no ratio rows for 'other'"):
        ratio_sentences(ratios(agg, "vllm"), agg, "other", "vllm")


def test_plot_of_a_full_sweep_embeds_under_150_kb():
    """notebook 07 embeds this figure: at most 150 KB of base64 PNG (CONTRIBUTING.md)."""
    labels = [f"target number {i} with a long label" for i in range(11)]
    agg = aggregate([row(label, c, r, tput=100.0 * c * (i + 1) + r) for i, label in enumerate(labels)
                     for c in (1, 8, 32) for r in (0, 1)])
    assert embedded_png_bytes(plot(agg, title="cpu: 32 tokens in, 32 out")) <= 150_000


def test_pivot_makes_one_row_per_label_and_a_column_per_concurrency():
    from scripts.bench.compare import pivot

    rows = [{"label": "a", "concurrency": 8, "output_throughput": 2.0}, {"label": "a", "concurrency": 1, "output_throughput": 1.0},
            {"label": "b", "concurrency": 1, "output_throughput": 3.0}]
    got, columns = pivot(rows, "output_throughput")
    assert columns == ["label", "concurrency=1", "concurrency=8"]
    assert got == [{"label": "a", "concurrency=8": 2.0, "concurrency=1": 1.0}, {"label": "b", "concurrency=1": 3.0}]
    assert table(got, columns).splitlines()[3].split() == ["b", "3.00"]  # a missing level is an empty cell


def test_side_by_side_prints_medians_and_ratios_and_saves_them(tmp_path):
    rows = [row("off", 32, repeat=k, tput=t) for k, t in enumerate((100.0, 120.0))] + [row("on", 32, tput=150.0)]
    text = side_by_side(rows, "off", tmp_path)
    medians, ratio_table = text.split("\n\n")
    assert "output_throughput" in medians and "110.00" in medians and "150.00" in medians
    assert "throughput_ratio" in ratio_table and "1.36" in ratio_table
    assert {f.name for f in tmp_path.iterdir()} == {f"{n}.{x}" for n in ("runs", "medians", "ratios") for x in ("json", "csv")}


def test_table_shows_html_in_a_notebook_and_the_plain_table_elsewhere():
    rows = [{"label": "b <x>", "concurrency": 8, "tput": 1.234}, {"label": "a", "concurrency": 1, "tput": float("nan")}]
    shown = Table(rows, ["label", "concurrency", "tput"], digits=1, sort_by=("concurrency",), caption="tok/s & more")
    assert repr(shown) == str(shown) == "tok/s & more\n" + table(rows, ["label", "concurrency", "tput"], digits=1,
                                                                 sort_by=("concurrency",))
    assert repr(Table(rows, ["label"])) == table(rows, ["label"])  # no caption: the table alone
    html = shown._repr_html_()
    assert html.startswith("<table><caption") and "tok/s &amp; more" in html and "b &lt;x&gt;" in html
    assert html.count("<tr>") == 3 and html.count("</th>") == 3
    assert html.index(">a<") < html.index(">b &lt;x&gt;<")  # sorted as the text is
    assert "<td>1.2</td>" in html and "<td>nan</td>" in html and "<th>tput</th>" in html  # numbers: right, as JupyterLab sets
    assert '<td style="text-align:left;white-space:nowrap">a</td>' in html  # a label column reads left, never wraps
    from test_notebook_outputs import table_lengths  # the output budget counts its rows, header left out
    assert table_lengths(html) == [2]


def test_ratio_range_and_versus_sentences_are_rendered_from_the_rows():
    agg = aggregate([row("vllm", c, tput=1000.0) for c in (1, 8, 32)]
                    + [row("shared", 1, tput=440.0), row("shared", 8, tput=290.0), row("shared", 32, tput=230.0),
                       row("own", 1, tput=430.0), row("own", 8, tput=190.0), row("own", 32, tput=460.0)])
    ratio_rows = ratios(agg, "vllm")
    assert ratio_range_sentence(ratio_rows, "shared", "vllm") == (
        "shared delivered 0.44 at concurrency 1, 0.29 at concurrency 8, 0.23 at concurrency 32 of vllm's output "
        "tokens per second.")
    said = versus_sentences(ratio_rows, "shared", "own", "vllm", names=("one Triton", "a Triton each"),
                            cpu_ms_per_token={"shared": 1.6, "own": 2.016}, cpu_concurrency=32, cpu_what="all of it")
    assert said == [
        "At concurrency 1, one Triton delivered 0.44 of vllm's output tokens per second and a Triton each 0.43: "
        "about the same (within 5%).",
        "At concurrency 8, one Triton delivered 0.29 of vllm's output tokens per second and a Triton each 0.19: "
        "one Triton delivered 1.53 times as much.",
        "At concurrency 32, one Triton delivered 0.23 of vllm's output tokens per second and a Triton each 0.46: "
        "a Triton each delivered 2.00 times as much; CPU per output token (all of it): 1.60 ms against 2.02 ms."]
    assert versus_sentences(ratio_rows, "shared", "own", "vllm")[0].startswith("At concurrency 1, shared delivered")
    with pytest.raises(ValueError, match="no ratio rows for 'nobody'"):
        versus_sentences(ratio_rows, "shared", "nobody", "vllm")
    with pytest.raises(ValueError, match="no ratio rows for 'nobody'"):
        ratio_range_sentence(ratio_rows, "nobody", "vllm")
