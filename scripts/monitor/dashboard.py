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
#: The panel of inferences per execution of each Triton model (``nv_inference_count / nv_inference_exec_count``).
BATCH_PANEL = "Average batch size Triton formed"
#: The panel of Serve's HTTP requests per second by route and status code.
HTTP_PANEL = "Serve HTTP requests per second"


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


def legend(target: dict[str, Any], labels: dict[str, str]) -> str:
    """A target's ``legendFormat`` with each ``{{label}}`` replaced by the series' value, as Grafana writes it."""
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), target.get("legendFormat") or "")
    return " ".join(text.split())


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
                    ax.plot(*zip(*points), label=legend(target, series["labels"])[:40] or None, linewidth=1,
                            antialiased=False)
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


def panel_peaks(prom, title: str, start: float, end: float, dashboard: dict[str, Any] | None = None, *,
                step: float = 1.0, rate_window: str = RATE_WINDOW, gpu: bool = False) -> list[dict[str, Any]]:
    """The highest value of every series the panel ``title`` plots over ``start``..``end``: one
    ``{"legend", "labels", "peak"}`` per series with data, in the panel's order (what a reader would
    read off the plot). ``KeyError`` for a title the dashboard does not have."""
    dashboard = load() if dashboard is None else dashboard
    found = [p for p in panels(dashboard, gpu) if p.get("title") == title]
    if not found:
        raise KeyError(f"no panel {title!r}; panels: {[p.get('title') for p in panels(dashboard, gpu)]}")
    out = []
    for target in found[0].get("targets", []):
        for series in prom.query_range(promql(target["expr"], rate_window), start, end, step):
            values = [v for _, v in series["values"] if math.isfinite(v)]
            if values:
                out.append({"legend": legend(target, series["labels"]), "labels": series["labels"], "peak": max(values)})
    return out


def dynamic_batching(repo: str | Path, models) -> dict[str, bool]:
    """``{model: whether its config.pbtxt in the filled repository ``repo`` sets dynamic_batching}``."""
    from scripts.triton.repository.fill import read_model_config  # noqa: PLC0415

    return {m: read_model_config(Path(repo), m).HasField("dynamic_batching") for m in sorted(models)}


def batch_size_sentence(peaks: list[dict[str, Any]], dynamic_batching: dict[str, bool], rate_window: str = RATE_WINDOW) -> str:
    """What the batch-size panel showed, per model: the highest average batch (inferences per execution
    over ``rate_window``), models whose config sets ``dynamic_batching`` (``{model: bool}``) first."""
    highest: dict[str, float] = {}
    for row in peaks:
        model = row["labels"].get("model", "?")
        highest[model] = max(highest.get(model, 0.0), row["peak"])
    if not highest:
        return "Triton formed no batch in this window (no executions)."

    def listed(models: list[str]) -> str:
        return ", ".join(f"{m} {highest[m]:.1f}" for m in models)

    batching = sorted((m for m in highest if dynamic_batching.get(m)), key=lambda m: (-highest[m], m))
    single = sorted((m for m in highest if not dynamic_batching.get(m)), key=lambda m: (-highest[m], m))
    parts = ([f"{listed(batching)} (config with dynamic_batching)"] if batching else []) + \
            ([f"{listed(single)} (without)"] if single else [])
    return f"Requests per Triton execute call, the highest {rate_window} average: " + "; ".join(parts) + "."


def http_status_sentence(peaks: list[dict[str, Any]], probed: tuple[str, ...], failed: int) -> str:
    """What the Serve HTTP panel's series other than 2xx are. 404s come from the load generator
    probing paths the application does not serve (``probed``: :data:`scripts.bench.vllm_bench.PROBED_PATHS`);
    any other status is named as an error. ``failed``: benchmark requests that failed, as the runs counted them."""
    def routes(rows: list[dict[str, Any]]) -> str:
        return ", ".join(sorted({r["labels"].get("route", "?") for r in rows}))

    others = [r for r in peaks if not str(r["labels"].get("status_code", "")).startswith("2")]
    not_found = [r for r in others if str(r["labels"].get("status_code")) == "404"]
    errors = [r for r in others if r not in not_found]
    said = [f"{failed} benchmark request(s) failed" if failed else "No benchmark request failed"]
    if not_found:
        said.append(f"the 404 series ({routes(not_found)}), and the latency lines of those routes, are vllm bench serve "
                    f"asking each base URL for {' and '.join(probed)} before and after a run, paths the Serve "
                    "application does not serve")
    if errors:
        said.append("Serve answered " + ", ".join(sorted({f"{r['labels'].get('route', '?')} {r['labels'].get('status_code')}"
                                                         for r in errors})) + ": errors, see the Serve logs")
    if not others:
        said.append("Serve answered every HTTP request with a 2xx")
    return "; ".join(said) + "."
