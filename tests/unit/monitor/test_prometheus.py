"""scripts.monitor against a real Prometheus (Debian's package) scraping a real exporter.

A Triton takes a minute to start; a prometheus_client exporter with Triton's metric names stands in
for its metrics port. The live check of the shipped dashboard against Triton and Serve runs elsewhere.
"""
import json
import os
import shutil
import time

import pytest
import yaml

from scripts.envcheck import MissingComponent
from scripts.monitor import dashboard
from scripts.monitor.gpu import TRITON_GPU_METRICS
from scripts.monitor.prometheus import (INSTALL_HINT, PrometheusError, PrometheusServer, address, check_config,
                                        render_config, to_frame, triton_targets, write_sd_file)
from scripts.procs.process_guard import is_running, live_group_members
from scripts.procs.ports import free_port

prometheus_client = pytest.importorskip("prometheus_client")

if not (shutil.which("prometheus") and shutil.which("promtool")):
    if os.geteuid() != 0:  # only root can install it (env/setup_env.sh says so)
        pytest.skip(f"Prometheus is not installed: {INSTALL_HINT}", allow_module_level=True)
    pytest.fail(f"Prometheus is not installed although env/setup_env.sh installs it as root: {INSTALL_HINT}",
                pytrace=False)


@pytest.fixture(scope="module")
def exporter():
    """A metrics endpoint on 127.0.0.1 with two of Triton's gauges-as-counters (no ``_total`` suffix)."""
    registry = prometheus_client.CollectorRegistry()
    count = prometheus_client.Gauge("nv_inference_count", "inferences", ["model", "version"], registry=registry)
    execs = prometheus_client.Gauge("nv_inference_exec_count", "executions", ["model", "version"], registry=registry)
    count.labels("ensemble", "1").set(12)
    execs.labels("ensemble", "1").set(4)
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)
    yield f"http://127.0.0.1:{port}/metrics", count
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def prom(exporter):
    server = PrometheusServer(render_config({"r0": exporter[0]})).start(timeout_s=30)
    pid, tmp = server.pid, server.tmp
    try:
        server.wait_for_targets(["triton"], timeout_s=30)
        yield server
    finally:
        server.stop()
    assert not is_running(pid) and not live_group_members(pid) and not tmp.exists()


def _wait(fn, timeout_s=15):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    return fn()


# --- config ----------------------------------------------------------------------------------------

def test_rendered_config_passes_promtool(tmp_path):
    sd = write_sd_file(tmp_path / "triton.json", {"a": "http://127.0.0.1:8002/metrics", "b": "127.0.0.1:8102"})
    assert json.loads(sd.read_text()) == [{"targets": ["127.0.0.1:8002"], "labels": {"replica": "a"}},
                                          {"targets": ["127.0.0.1:8102"], "labels": {"replica": "b"}}]
    ray_sd = tmp_path / "prom_metrics_service_discovery.json"
    ray_sd.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": ["127.0.0.1:9999"]}]))
    text = render_config({"r1": "http://127.0.0.1:8002/metrics"}, ray=["127.0.0.1:9100"], ray_sd_file=ray_sd,
                         triton_sd_file=sd, jobs={"extra": ["127.0.0.1:9200"]})
    config = yaml.safe_load(text)
    assert config["global"]["scrape_interval"] == config["global"]["scrape_timeout"] == "1000ms"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert list(jobs) == ["triton", "ray", "extra"]
    assert jobs["triton"]["metrics_path"] == "/metrics"
    assert jobs["triton"]["static_configs"] == [{"targets": ["127.0.0.1:8002"], "labels": {"replica": "r1"}}]
    assert jobs["ray"]["file_sd_configs"] == [{"files": [str(ray_sd)]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(text)
    assert "SUCCESS" in check_config(path)
    listed = yaml.safe_load(render_config(["127.0.0.1:1", "127.0.0.1:2"]))["scrape_configs"][0]["static_configs"]
    assert [c["labels"]["replica"] for c in listed] == ["0", "1"]


def test_promtool_refuses_a_bad_config(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(render_config(["127.0.0.1:1"]).replace("scrape_timeout: 1000ms", "scrape_timeout: 5s"))
    with pytest.raises(PrometheusError, match="scrape timeout greater than scrape interval"):
        check_config(bad)


def test_targets_and_addresses():
    assert address("http://127.0.0.1:8002/metrics") == ("127.0.0.1:8002", "/metrics")
    assert address("127.0.0.1:8002") == ("127.0.0.1:8002", "/metrics")
    with pytest.raises(ValueError):
        address("127.0.0.1")
    with pytest.raises(ValueError, match="different metrics paths"):
        render_config(["http://127.0.0.1:1/metrics", "http://127.0.0.1:2/other"])
    infos = [{"replica": "a", "metrics_url": "http://127.0.0.1:1/metrics"}, {"replica": "b", "mode": "in-process"}]
    assert triton_targets(infos) == {"a": "http://127.0.0.1:1/metrics"}


def test_missing_binary_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    server = PrometheusServer(render_config(["127.0.0.1:1"]))
    with pytest.raises(MissingComponent, match="apt-get install -y --no-install-recommends prometheus"):
        server.start()
    assert server.process is None and server.tmp is None
    with pytest.raises(MissingComponent, match="promtool"):
        check_config(tmp_path / "x.yml")


# --- the server --------------------------------------------------------------------------------------

def test_a_config_prometheus_refuses_fails_with_the_log_tail():
    server = PrometheusServer("scrape_configs: [{job_name: x, scrape_interval: nonsense}]\n")
    with pytest.raises(PrometheusError, match="exited with status .* before it was ready; log:\n(.|\n)*nonsense"):
        server.start(timeout_s=20)
    assert server.process is None and server.tmp is None


def test_query_and_query_range_see_the_exporter(prom, exporter):
    assert prom.url.startswith("http://127.0.0.1:") and prom.is_ready()
    got = _wait(lambda: prom.query("sum by (replica, model) (nv_inference_count) / "
                                   "sum by (replica, model) (nv_inference_exec_count)"))
    assert got and got[0]["labels"] == {"model": "ensemble", "replica": "r0"} and got[0]["value"] == 3.0
    exporter[1].labels("ensemble", "1").set(20)
    assert _wait(lambda: [s for s in prom.query("nv_inference_count") if s["value"] == 20.0])
    end = time.time()
    series = prom.query_range("nv_inference_count", end - 10, end, step=1)
    assert len(series) == 1 and series[0]["labels"]["job"] == "triton"
    values = [v for _, v in series[0]["values"]]
    assert values and values[-1] == 20.0 and set(values) <= {12.0, 20.0}
    rows = to_frame(series)
    assert len(rows) == len(values)
    if isinstance(rows, list):  # no pandas in the tutorial's environment
        assert rows[-1]["value"] == 20.0 and rows[-1]["replica"] == "r0"
    assert prom.query("1 + 1") == [{"labels": {}, "time": pytest.approx(time.time(), abs=60), "value": 2.0}]
    with pytest.raises(PrometheusError, match="parse error"):
        prom.query("rate(")


def test_reload_takes_a_new_config_and_refuses_a_bad_one(prom):
    prom.update_config(prom.config_text)
    with pytest.raises(PrometheusError, match="reload failed"):
        prom.update_config("scrape_configs: [{job_name: x, scrape_interval: nonsense}]\n")
    prom.update_config(render_config({"r0": prom.targets()[0]["labels"]["instance"]}))
    assert prom.is_ready()


# --- the Grafana dashboard ---------------------------------------------------------------------------

def test_the_shipped_dashboard_is_a_grafana_export_with_a_prometheus_input(prom):
    board = dashboard.load()
    assert board["schemaVersion"] >= 39 and board["uid"] and board["title"]
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    assert board["__inputs"][0]["pluginId"] == "prometheus"
    panels = dashboard.panels(board)
    assert len(panels) >= 7 and len({p["title"] for p in panels}) == len(panels)
    gpu_panels = [p for p in dashboard.panels(board, gpu=True) if p not in panels]
    assert gpu_panels and all(p in dashboard.panels(board, gpu=True) for p in panels)  # the GPU row: only asked for
    gpu_exprs = " ".join(t["expr"] for p in gpu_panels for t in p["targets"])
    assert all(metric in gpu_exprs for metric in TRITON_GPU_METRICS)
    assert not any(metric in " ".join(e for _, e in dashboard.panel_queries(board)) for metric in TRITON_GPU_METRICS)
    for panel in panels + gpu_panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"]), panel["title"]
    exprs = " ".join(expr for _, expr in dashboard.panel_queries(board))
    for metric in ("nv_inference_queue_duration_us", "nv_inference_count", "nv_inference_exec_count",
                   "nv_inference_request_success", "nv_inference_request_failure", "tutorial_engine_requests_running",
                   "ray_serve_replica_processing_queries", "ray_serve_deployment_replica_healthy"):
        assert metric in exprs, metric
    assert "nv_inference_request_batch_size" not in exprs  # Triton has no such metric
    for _, expr in dashboard.panel_queries(board, gpu=True):
        prom.query(dashboard.promql(expr))  # each parses (a parse error raises)
    with pytest.raises(ValueError, match="model"):
        dashboard.promql("rate(x{model=\"$model\"}[$__rate_interval])")


def test_check_panels_names_the_empty_ones(prom):
    def board(*titles_exprs):
        return {"panels": [{"type": "row", "title": "row", "panels": [
            {"title": t, "targets": [{"refId": "A", "expr": e}]} for t, e in titles_exprs]}]}

    present = ("batch", "sum by (model) (rate(nv_inference_count[$__rate_interval])) + 1")
    absent = ("queue", "rate(nv_inference_queue_duration_us[$__rate_interval])")
    assert _wait(lambda: dashboard.query_counts(prom, board(present))[0][2])
    assert dashboard.check_panels(prom, board(present)) == {"batch": 1}
    with pytest.raises(dashboard.EmptyPanels) as caught:
        dashboard.check_panels(prom, board(present, absent), start=time.time() - 10, step=1)
    assert caught.value.titles == ["queue"] and caught.value.counts == {"batch": 1, "queue": 0}
    gpu_row = {"type": "row", "title": dashboard.GPU_ROW, "panels": [{"title": "gpu", "targets": [{"refId": "A", "expr": absent[1]}]}]}
    with_gpu = board(present)
    with_gpu["panels"].append(gpu_row)
    assert dashboard.check_panels(prom, with_gpu) == {"batch": 1}  # a CPU run: the GPU row is not asked for
    with pytest.raises(dashboard.EmptyPanels, match="gpu"):
        dashboard.check_panels(prom, with_gpu, gpu=True)
    idle = ("idle", "rate(nv_inference_count[10s]) / rate(nv_inference_count[10s]) * 0 / 0")  # NaN only
    with pytest.raises(dashboard.EmptyPanels, match="idle"):
        dashboard.check_panels(prom, board(idle))
