"""The Grafana dashboard that ships with the tutorial (``env/monitoring/grafana/llm-serving.json``) and
a check that each of its panels shows data from a live Prometheus.

The dashboard is an export with a ``${DS_PROMETHEUS}`` input: Grafana's "Import dashboard" asks which
Prometheus data source to use (point it at the one scripts/monitor/prometheus.py started, or your own).
Its PromQL uses Grafana's ``$__rate_interval``; :func:`promql` puts a fixed window in its place so that
the same expressions run against Prometheus's HTTP API.

Metric names, as a live run (Triton 2.51 of the nvidia-pytriton wheel, Ray 2.60) exported them:
Triton's ``nv_inference_*`` counters (``nv_inference_count``, ``nv_inference_exec_count``,
``nv_inference_queue_duration_us`` ...; Triton has no ``nv_inference_request_batch_size``: the batch it
formed is ``count / exec_count``), the vLLM backend's gauges on the same port
(scripts/triton/backend/vllm_backend.py), and Serve's metrics with Ray's ``ray_`` prefix
(ray/serve/_private/replica.py, deployment_state.py, router.py, request_ingress_metrics.py).
"""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

from scripts.paths import REPO_ROOT

DASHBOARD_PATH = REPO_ROOT / "env" / "monitoring" / "grafana" / "llm-serving.json"
#: The rate window that stands in for ``$__rate_interval``: at least four 1 s scrapes.
RATE_WINDOW = "10s"
GRAFANA_VARIABLES = ("$__rate_interval", "$__interval")
#: The row of panels over Triton's GPU metrics: only where Triton exports them (scripts/monitor/gpu.py).
GPU_ROW = "GPU"


class EmptyPanels(AssertionError):
    """Panels whose every query returned no data; ``titles`` names them."""

    def __init__(self, titles: list[str], counts: dict[str, int]):
        super().__init__(f"panels without data: {titles} (series per panel: {counts})")
        self.titles, self.counts = titles, counts


def load(path: str | Path = DASHBOARD_PATH) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def panels(dashboard: dict[str, Any], gpu: bool = False) -> list[dict[str, Any]]:
    """Every panel, those inside (collapsed) rows included; the rows themselves left out, and the
    :data:`GPU_ROW`'s panels too unless ``gpu``."""
    found = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            if gpu or panel.get("title") != GPU_ROW:
                found += panels({"panels": panel.get("panels", [])}, gpu)
        else:
            found.append(panel)
    return found


def panel_queries(dashboard: dict[str, Any] | None = None, gpu: bool = False) -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every target of every panel, in the dashboard's order."""
    dashboard = load() if dashboard is None else dashboard
    return [(p["title"], t["expr"]) for p in panels(dashboard, gpu) for t in p.get("targets", []) if t.get("expr")]


def promql(expr: str, rate_window: str = RATE_WINDOW) -> str:
    """The expression with Grafana's interval variables replaced by ``rate_window``."""
    for variable in GRAFANA_VARIABLES:
        expr = expr.replace(variable, rate_window)
    left = re.findall(r"\$\{?\w+\}?", expr)
    if left:
        raise ValueError(f"Grafana variables {left} in {expr!r} have no value outside Grafana")
    return expr


def _live(series: dict[str, Any]) -> bool:
    """A series with at least one number (0/0 of an idle rate is NaN: nothing to plot)."""
    values = [v for _, v in series["values"]] if "values" in series else [series["value"]]
    return any(isinstance(v, float) and math.isfinite(v) for v in values)


def query_counts(prom, dashboard: dict[str, Any] | None = None, *, start: float | None = None,
                 end: float | None = None, step: float = 1.0, rate_window: str = RATE_WINDOW,
                 gpu: bool = False) -> list[tuple[str, str, int]]:
    """``(title, expr, series with data)`` for every panel target: a range query over ``start``..``end``
    when given (a run's window), else an instant query now. ``prom``: a PrometheusServer; ``gpu``:
    the GPU row's panels too."""
    counts = []
    for title, expr in panel_queries(dashboard, gpu):
        query = promql(expr, rate_window)
        if start is not None:
            series = prom.query_range(query, start, time.time() if end is None else end, step)
        else:
            series = prom.query(query)
        counts.append((title, expr, sum(_live(s) for s in series)))
    return counts


def check_panels(prom, dashboard: dict[str, Any] | None = None, **window) -> dict[str, int]:
    """``{panel title: series with data}`` over all of a panel's targets; :class:`EmptyPanels` naming
    the panels with none. ``window``: ``start``, ``end``, ``step``, ``rate_window``, ``gpu`` of :func:`query_counts`."""
    counts: dict[str, int] = {}
    for title, _, n in query_counts(prom, dashboard, **window):
        counts[title] = counts.get(title, 0) + n
    empty = [title for title, n in counts.items() if n == 0]
    if empty:
        raise EmptyPanels(empty, counts)
    return counts


def plot_panels(prom, start: float, end: float, dashboard: dict[str, Any] | None = None, *, step: float = 1.0,
                rate_window: str = RATE_WINDOW, columns: int = 3, marks: dict[str, float] | None = None,
                gpu: bool = False):
    """The dashboard's panels as a grid of matplotlib plots over ``start``..``end`` (seconds since the
    epoch), one line per series with the target's legend; ``marks``: ``{label: time}`` drawn as
    vertical lines (e.g. where each phase of a benchmark began); ``gpu``: the GPU row's panels too.
    Returns the figure."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    dashboard = load() if dashboard is None else dashboard
    shown_panels = [p for p in panels(dashboard, gpu) if p.get("targets")]
    rows = -(-len(shown_panels) // columns)
    # 72 dpi and lines without antialiasing keep the PNG a notebook embeds under 150 KB (CONTRIBUTING.md)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.4 * rows), dpi=72, squeeze=False)
    for ax, panel in zip(axes.flat, shown_panels):
        for target in panel["targets"]:
            for series in prom.query_range(promql(target["expr"], rate_window), start, end, step):
                points = [(t - start, v) for t, v in series["values"] if math.isfinite(v)]
                if points:
                    legend = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: series["labels"].get(m.group(1), ""),
                                    target.get("legendFormat") or "")
                    ax.plot(*zip(*points), label=" ".join(legend.split())[:40] or None, linewidth=1, antialiased=False)
        for label, when in (marks or {}).items():
            ax.axvline(when - start, color="grey", linestyle=":", linewidth=1)
        ax.set_title(panel["title"], fontsize=9)
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(shown_panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
