"""scripts.monitor.dashboard: what notebook 07 prints under the dashboard, read from the same queries
as the plot (a fake Prometheus here; the live one in tests/unit/monitor/test_prometheus.py)."""
from __future__ import annotations

import math

import pytest

from scripts.monitor import dashboard


class FixedProm:
    """Answers each panel query with the series given for the first metric name it contains."""

    def __init__(self, by_metric):
        self.by_metric, self.asked = by_metric, []

    def query_range(self, expr, start, end, step):
        self.asked.append(expr)
        for metric, series in self.by_metric.items():
            if metric in expr:
                return [{"labels": labels, "values": [(start + i, v) for i, v in enumerate(values)]}
                        for labels, values in series]
        return []


def test_panel_peaks_reads_each_series_of_the_panel_under_its_legend():
    prom = FixedProm({"nv_inference_exec_count": [({"model": "postprocessing", "replica": "shared"}, [1.0, 2.8, math.nan]),
                                                  ({"model": "ensemble", "replica": "shared"}, [math.nan, 1.0]),
                                                  ({"model": "idle", "replica": "shared"}, [math.nan])]})
    peaks = dashboard.panel_peaks(prom, dashboard.BATCH_PANEL, 0.0, 60.0)
    assert [(p["legend"], p["peak"]) for p in peaks] == [("postprocessing (shared)", 2.8), ("ensemble (shared)", 1.0)]
    assert "$__rate_interval" not in prom.asked[0] and f"[{dashboard.RATE_WINDOW}]" in prom.asked[0]
    with pytest.raises(KeyError, match="no panel 'nope'"):
        dashboard.panel_peaks(prom, "nope", 0.0, 60.0)
    assert dashboard.HTTP_PANEL in {title for title, _ in dashboard.panel_queries()}


def test_batch_size_sentence_names_each_models_highest_batch_and_whether_it_batches():
    peaks = [{"labels": {"model": m, "replica": r}, "peak": v} for m, r, v in
             [("postprocessing", "shared", 2.8), ("vllm_engine", "shared", 1.5), ("vllm_engine", "other", 1.7),
              ("ensemble", "shared", 1.0), ("preprocessing", "shared", 1.0)]]
    said = dashboard.batch_size_sentence(peaks, {"postprocessing": True, "vllm_engine": True, "ensemble": False})
    assert said == ("Requests per Triton execute call, the highest 10s average: postprocessing 2.8, vllm_engine 1.7 "
                    "(config with dynamic_batching); ensemble 1.0, preprocessing 1.0 (without).")
    assert dashboard.batch_size_sentence([], {}) == "Triton formed no batch in this window (no executions)."


def test_dynamic_batching_is_read_from_the_filled_configs(tmp_path):
    for name, text in {"batches": 'name: "batches"\nmax_batch_size: 8\ndynamic_batching {}\n',
                       "alone": 'name: "alone"\nmax_batch_size: 8\n'}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(text)
    assert dashboard.dynamic_batching(tmp_path, {"alone", "batches"}) == {"alone": False, "batches": True}


def test_http_status_sentence_explains_404s_and_names_errors():
    def series(route, code):
        return {"labels": {"route": route, "status_code": code}, "peak": 1.0}

    probed = ("/tokenize", "/metrics")
    ok = [series("/engine/v1/completions", "200")]
    assert dashboard.http_status_sentence(ok, probed, 0) == (
        "No benchmark request failed; Serve answered every HTTP request with a 2xx.")
    said = dashboard.http_status_sentence(ok + [series("/engine", "404"), series("/ensemble", "404")], probed, 0)
    assert said == ("No benchmark request failed; the 404 series (/engine, /ensemble), and the latency lines of those "
                    "routes, are vllm bench serve asking each base URL for /tokenize and /metrics before and after a run, "
                    "paths the Serve application does not serve.")
    said = dashboard.http_status_sentence(ok + [series("/engine/v1/completions", "500")], probed, 3)
    assert said == "3 benchmark request(s) failed; Serve answered /engine/v1/completions 500: errors, see the Serve logs."
