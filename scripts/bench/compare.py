"""Side-by-side numbers of one benchmark run: medians over repeats, ratios to a baseline, files, plots.

A run is a list of rows, one per (target, concurrency, repeat), with the names of ``vllm bench
serve``'s result file (``output_throughput``, ``median_ttft_ms``, ...; :mod:`scripts.bench.vllm_bench`
and :mod:`scripts.bench.triton_stream` both write them). :func:`aggregate` takes the median of
the repeats and keeps their spread; :func:`ratios` sets every target against the baseline of the
same run (``vllm serve`` in notebook 07) at the same concurrency, and states the serving layers'
overhead in milliseconds per request (end-to-end latency) and per token (inter-token latency).
"""
from __future__ import annotations

import csv
import html
import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterable

#: The per-run numbers compared (vllm bench serve's names), and how a table shows them.
METRICS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms",
           "median_e2el_ms", "p99_e2el_ms")


def aggregate(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (label, concurrency): the median of each metric over the repeats, the lowest and
    highest throughput of the repeats, and the requests that failed in all of them."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["label"], int(row["concurrency"])), []).append(row)
    out = []
    for (label, concurrency), runs in groups.items():
        agg: dict[str, Any] = {"label": label, "concurrency": concurrency, "repeats": len(runs),
                               "completed": sum(int(r.get("completed", 0)) for r in runs),
                               "failed": sum(int(r.get("failed", 0)) for r in runs)}
        for metric in METRICS:
            values = [float(r[metric]) for r in runs if r.get(metric) is not None and not math.isnan(float(r[metric]))]
            agg[metric] = statistics.median(values) if values else float("nan")
        tput = [float(r.get("output_throughput") or 0.0) for r in runs]
        tput = [0.0 if math.isnan(t) else t for t in tput]  # NaN, like None: no throughput (min/max would depend on order)
        agg["throughput_min"], agg["throughput_max"] = min(tput), max(tput)
        out.append(agg)
    return out


def ratios(aggregated: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Every target against ``baseline`` at the same concurrency: throughput ratio, TTFT p50
    difference, and the overhead per request (E2E p50) and per token (ITL p50), in ms."""
    base = {row["concurrency"]: row for row in aggregated if row["label"] == baseline}
    if not base:
        raise ValueError(f"no rows for the baseline {baseline!r}; labels: {sorted({r['label'] for r in aggregated})}")
    out = []
    for row in aggregated:
        ref = base.get(row["concurrency"])
        if ref is None:
            continue
        out.append({"label": row["label"], "concurrency": row["concurrency"],
                    "throughput_ratio": row["output_throughput"] / ref["output_throughput"] if ref["output_throughput"] else float("nan"),
                    "ttft_p50_delta_ms": row["median_ttft_ms"] - ref["median_ttft_ms"],
                    "overhead_per_request_ms": row["median_e2el_ms"] - ref["median_e2el_ms"],
                    "overhead_per_token_ms": row["median_itl_ms"] - ref["median_itl_ms"],
                    "failed": row["failed"]})
    return out


def ratio_sentences(ratio_rows: list[dict[str, Any]], aggregated: list[dict[str, Any]], label: str, baseline: str,
                    other: dict[int, float] | None = None, other_name: str = "") -> list[str]:
    """One sentence per concurrency on how ``label`` fared against ``baseline``, rendered from the
    measured rows (so a notebook's reading of a run never goes stale); ``other``: ``{concurrency:
    throughput ratio}`` of another measurement to cite beside it (``other_name`` says which)."""
    base = {r["concurrency"]: r for r in aggregated if r["label"] == baseline}
    out = []
    for r in sorted((r for r in ratio_rows if r["label"] == label), key=lambda r: r["concurrency"]):
        c = r["concurrency"]
        cited = f" ({other[c]:.2f} {other_name})" if other and c in other else ""
        out.append(f"At concurrency {c}, {label} delivered {r['throughput_ratio']:.2f} of {baseline}'s output tokens "
                   f"per second{cited}; its first token came {r['ttft_p50_delta_ms']:+.0f} ms from {baseline}'s "
                   f"(median {base[c]['median_ttft_ms']:.0f} ms), and a streamed chunk took {base[c]['median_itl_ms']:.0f} ms "
                   f"to come (median, {baseline}).")
    if not out:
        raise ValueError(f"no ratio rows for {label!r}; labels: {sorted({r['label'] for r in ratio_rows})}")
    return out


def _ratio_by_concurrency(ratio_rows: list[dict[str, Any]], label: str) -> dict[int, float]:
    found = {r["concurrency"]: r["throughput_ratio"] for r in ratio_rows if r["label"] == label}
    if not found:
        raise ValueError(f"no ratio rows for {label!r}; labels: {sorted({r['label'] for r in ratio_rows})}")
    return dict(sorted(found.items()))


def ratio_range_sentence(ratio_rows: list[dict[str, Any]], label: str, baseline: str) -> str:
    """How ``label``'s output tokens per second compared with ``baseline``'s at each concurrency, in one
    sentence rendered from the ratio rows (:func:`ratios`)."""
    by_c = _ratio_by_concurrency(ratio_rows, label)
    listed = ", ".join(f"{ratio:.2f} at concurrency {c}" for c, ratio in by_c.items())
    return f"{label} delivered {listed} of {baseline}'s output tokens per second."


def versus_sentences(ratio_rows: list[dict[str, Any]], first: str, second: str, baseline: str,
                     names: tuple[str, str] | None = None, *, same_within: float = 0.05,
                     cpu_ms_per_token: dict[str, float] | None = None, cpu_concurrency: int | None = None,
                     cpu_what: str = "") -> list[str]:
    """Two targets set against each other, one sentence per concurrency both ran at: each one's share of
    ``baseline``'s output tokens per second and which delivered more (``about the same`` within
    ``same_within`` of each other). ``names``: how the sentences call them (their labels by default).
    ``cpu_ms_per_token``: ``{label: CPU ms per output token}`` measured at ``cpu_concurrency``, cited
    in that concurrency's sentence (``cpu_what`` says whose CPU)."""
    a, b = _ratio_by_concurrency(ratio_rows, first), _ratio_by_concurrency(ratio_rows, second)
    name_a, name_b = names or (first, second)
    out = []
    for c in sorted(a.keys() & b.keys()):
        ra, rb = a[c], b[c]
        if rb and abs(ra / rb - 1) <= same_within:
            verdict = f"about the same (within {same_within:.0%})"
        elif ra > rb:
            verdict = f"{name_a} delivered {ra / rb:.2f} times as much" if rb else f"{name_a} delivered more"
        else:
            verdict = f"{name_b} delivered {rb / ra:.2f} times as much" if ra else f"{name_b} delivered more"
        sentence = (f"At concurrency {c}, {name_a} delivered {ra:.2f} of {baseline}'s output tokens per second and "
                    f"{name_b} {rb:.2f}: {verdict}")
        if cpu_ms_per_token and c == cpu_concurrency and first in cpu_ms_per_token and second in cpu_ms_per_token:
            sentence += (f"; CPU per output token{f' ({cpu_what})' if cpu_what else ''}: {cpu_ms_per_token[first]:.2f} ms "
                         f"against {cpu_ms_per_token[second]:.2f} ms")
        out.append(sentence + ".")
    if not out:
        raise ValueError(f"{first!r} and {second!r} have no concurrency in common")
    return out


def _cell(value: Any, digits: int) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str], digits: int = 2,
          sort_by: tuple[str, ...] = ()) -> str:
    """A plain-text table of ``rows`` (numbers rounded, ordered by the ``sort_by`` columns), for notebooks and logs."""
    if sort_by:
        rows = sorted(rows, key=lambda r: tuple(r[c] for c in sort_by))
    cells = [[_cell(r.get(c, ""), digits) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))) for row in cells]
    return "\n".join(lines)


class Table:
    """``rows`` as a table a notebook displays: HTML in JupyterLab (columns that do not wrap into each
    other whatever the width of the page), :func:`table`'s plain text everywhere else (``repr``: what a
    terminal, a log and nbval's comparison read). ``caption`` goes above both.

    ``display(Table(rows, ["label", "concurrency", ...]))``; :func:`pivot`'s result unpacks into it."""

    def __init__(self, rows: list[dict[str, Any]], columns: list[str], digits: int = 2,
                 sort_by: tuple[str, ...] = (), caption: str = ""):
        self.rows = sorted(rows, key=lambda r: tuple(r[c] for c in sort_by)) if sort_by else list(rows)
        self.columns, self.digits, self.caption = list(columns), digits, caption

    def __repr__(self) -> str:
        text = table(self.rows, self.columns, self.digits)
        return f"{self.caption}\n{text}" if self.caption else text

    __str__ = __repr__

    def _repr_html_(self) -> str:
        cells = [[_cell(r.get(c, ""), self.digits) for c in self.columns] for r in self.rows]
        numeric = [all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in self.rows)
                   and bool(self.rows) for c in self.columns]

        # JupyterLab right-aligns the cells of an output's table; a text column (the labels) reads left
        # and on one line
        tags = ["td" if numeric[i] else 'td style="text-align:left;white-space:nowrap"' for i in range(len(self.columns))]
        head = "".join(f"<th>{html.escape(c)}</th>" if numeric[i] else f'<th style="text-align:left">{html.escape(c)}</th>'
                       for i, c in enumerate(self.columns))
        body = "".join("<tr>" + "".join(f"<{tag}>{html.escape(v)}</td>" for tag, v in zip(tags, row)) + "</tr>"
                       for row in cells)
        caption = f'<caption style="text-align:left">{html.escape(self.caption)}</caption>' if self.caption else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def save(rows: list[dict[str, Any]], directory: Path, name: str, meta: dict[str, Any] | None = None) -> dict[str, Path]:
    """``<name>.json`` (settings and every row) and ``<name>.csv`` (the rows) under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = directory / f"{name}.json", directory / f"{name}.csv"
    json_path.write_text(json.dumps({"meta": meta or {}, "rows": rows}, indent=2, default=str) + "\n")
    columns = sorted({key for row in rows for key in row if not isinstance(row[key], (list, dict))})
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return {"json": json_path, "csv": csv_path}


def plot(aggregated: list[dict[str, Any]], title: str = ""):
    """Output tok/s and TTFT p50 against concurrency, one line per target (a matplotlib figure)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    # 72 dpi and lines without antialiasing keep the PNG a notebook embeds under 150 KB (CONTRIBUTING.md)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=72)
    labels = list(dict.fromkeys(r["label"] for r in aggregated))
    tab20 = plt.get_cmap("tab20").colors  # ten hues, then their lighter shades: no two targets in one colour
    colors = tab20[0::2] + tab20[1::2]
    for label, color in zip(labels, colors * (len(labels) // len(colors) + 1)):
        points = sorted((r for r in aggregated if r["label"] == label), key=lambda r: r["concurrency"])
        xs = [r["concurrency"] for r in points]
        left.errorbar(xs, [r["output_throughput"] for r in points], marker="o", label=label,
                      yerr=[[r["output_throughput"] - r["throughput_min"] for r in points],
                            [r["throughput_max"] - r["output_throughput"] for r in points]], capsize=3, antialiased=False,
                      color=color)
        right.plot(xs, [r["median_ttft_ms"] for r in points], marker="o", label=label, antialiased=False, color=color)
    for ax, ylabel in ((left, "output tokens/s (median, min-max of repeats)"), (right, "TTFT p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    right.set_yscale("log")
    # one legend for both plots, below them: inside an axes it covers the lines of a sweep of many targets
    handles, labels = right.get_legend_handles_labels()
    columns = min(3, len(labels)) or 1
    legend_rows = -(-len(labels) // columns)
    fig.set_size_inches(10, 3.6 + 0.22 * legend_rows)
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.1) / (3.6 + 0.22 * legend_rows), 1, 1))
    return fig


def pivot(rows: list[dict[str, Any]], value: str, by: str = "concurrency", key: str = "label") -> tuple[list[dict[str, Any]], list[str]]:
    """One row per ``key`` (in first-seen order) with a column ``<by>=<x>`` of ``value`` for each ``by``;
    returns the rows and their columns, for :func:`table`. A sweep of targets x concurrencies then fits
    in one short table (CONTRIBUTING.md: no table over 15 rows in a notebook)."""
    levels = sorted({r[by] for r in rows})
    columns = [key, *(f"{by}={x}" for x in levels)]
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:
        out.setdefault(r[key], {key: r[key]})[f"{by}={r[by]}"] = r[value]
    return list(out.values()), columns


def side_by_side(rows: list[dict[str, Any]], baseline: str | None, out_dir: Path,
                 ratio_rows: list[dict[str, Any]] | None = None) -> str:
    """The medians and the ratios to ``baseline``, as text; both saved beside the runs (a side-by-side bench's
    report). ``ratio_rows`` given (e.g. each route against its own baseline): those instead of ``ratios``."""
    agg = aggregate(rows)
    ratio_rows = ratio_rows if ratio_rows is not None else ratios(agg, baseline)
    save(rows, out_dir, "runs")
    save(agg, out_dir, "medians")
    save(ratio_rows, out_dir, "ratios")
    lines = [table(agg, ["label", "concurrency", "completed", "failed", "output_throughput", "median_ttft_ms",
                         "median_itl_ms", "p99_itl_ms"], sort_by=("concurrency", "label")), "",
             table(ratio_rows, ["label", "concurrency", "throughput_ratio", "ttft_p50_delta_ms", "overhead_per_token_ms"],
                   sort_by=("concurrency", "label"))]
    return "\n".join(lines)
