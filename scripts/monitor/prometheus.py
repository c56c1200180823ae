"""A real Prometheus server for the benchmark: scrape config, start/stop by handle, PromQL over HTTP.

Why it is built this way, and the sources: docs/design/monitor.md.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import yaml

from scripts.envcheck import MissingComponent
from scripts.procs.managed import ManagedServer
from scripts.procs.ports import free_port

INSTALL_COMMAND = "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus"
INSTALL_HINT = (f"install Debian's prometheus package (it has promtool) as root: `{INSTALL_COMMAND}` "
                "(env/setup_env.sh does it when run as root)")
#: Ray's service-discovery file name (ray/_private/ray_constants.py: PROMETHEUS_SERVICE_DISCOVERY_FILE).
RAY_SD_FILE_NAME = "prom_metrics_service_discovery.json"
#: Environment for ``ray.init`` (``LocalCluster(serve_env=RAY_METRICS_ENV)``) so that Ray's metrics keep
#: up with a 1 s scrape. Ray's processes export their metrics to the node's agent every
#: ``metrics_report_interval_ms`` (10 s by default), and the agent drops a gauge not refreshed for two
#: intervals (ray/_private/telemetry/open_telemetry_metric_recorder.py); Serve's controller refreshes
#: its status gauges (``serve_deployment_replica_healthy``) every ``RAY_SERVE_STATUS_GAUGE_REPORT_INTERVAL_S``
#: (10 s; ray/serve/_private/constants.py, deployment_state.py): with only the first shortened they
#: vanish for most of each 10 s.
RAY_METRICS_ENV = {"RAY_metrics_report_interval_ms": "1000", "RAY_SERVE_STATUS_GAUGE_REPORT_INTERVAL_S": "1"}


class PrometheusError(RuntimeError):
    """Prometheus did not start, refused a query, or promtool refused a config; the message says why."""


def binary(name: str = "prometheus") -> str:
    """The path of ``prometheus`` or ``promtool`` on PATH; :class:`MissingComponent` with the install step."""
    found = shutil.which(name)
    if not found:
        raise MissingComponent(f"`{name}` is not on PATH: {INSTALL_HINT}")
    return found


# --- targets and the scrape config -------------------------------------------------------------

def address(url: str) -> tuple[str, str]:
    """``http://127.0.0.1:8002/metrics`` (or ``127.0.0.1:8002``) -> (``127.0.0.1:8002``, ``/metrics``)."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    if not parts.hostname or not parts.port:
        raise ValueError(f"{url!r} is not host:port or a URL with a port")
    return f"{parts.hostname}:{parts.port}", parts.path or "/metrics"


def triton_targets(infos: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{replica: metrics_url}`` from Serve replicas' ``triton_info()`` (scripts/serve/service.py); an
    in-process Triton has no metrics port and is left out."""
    return {str(info.get("replica", i)): info["metrics_url"] for i, info in enumerate(infos) if info.get("metrics_url")}


def ray_metrics_targets() -> list[str]:
    """``host:port`` of every live node's metrics agent (``ray.nodes()``: ``NodeManagerAddress`` and
    ``MetricsExportPort``, as ray/_private/metrics_agent.py's service-discovery writer lists them)."""
    import ray  # noqa: PLC0415

    return sorted(f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in ray.nodes()
                  if n.get("Alive") and n.get("MetricsExportPort"))


def ray_service_discovery_file() -> Path:
    """This Ray session's service-discovery file (written only while the dashboard runs)."""
    import ray  # noqa: PLC0415

    node = ray._private.worker._global_node
    if node is None:
        raise RuntimeError("Ray is not initialised in this process")
    return Path(node.get_session_dir_path()) / RAY_SD_FILE_NAME


def write_sd_file(path: str | Path, targets: Mapping[str, str], label: str = "replica") -> Path:
    """A Prometheus file_sd file (``[{"targets": [...], "labels": {...}}]``) for ``{label value: URL}``,
    replaced atomically: Prometheus watches the file and picks up new targets without a restart."""
    path = Path(path)
    groups = [{"targets": [address(url)[0]], "labels": {label: name}} for name, url in targets.items()]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(groups, indent=1))
    os.replace(tmp, path)
    return path


def render_config(triton: Mapping[str, str] | Sequence[str] = (), *, ray: Sequence[str] = (),
                  ray_sd_file: str | Path | None = None, triton_sd_file: str | Path | None = None,
                  interval_s: float = 1.0, jobs: Mapping[str, Sequence[str]] | None = None) -> str:
    """The scrape config (YAML) of one benchmark run.

    ``triton``: ``{replica: metrics URL}`` (or a list of URLs, labelled ``0``, ``1`` ...), job ``triton``;
    ``triton_sd_file``: a file_sd file for the same job (:func:`write_sd_file`), for replicas that come
    and go. ``ray``: metrics agents' ``host:port`` (:func:`ray_metrics_targets`); ``ray_sd_file``: Ray's
    service-discovery file; both go to job ``ray``. ``jobs``: further ``{job: [host:port, ...]}``.
    The interval is short (1 s) for a run of minutes; the timeout may not exceed it.
    """
    interval = f"{int(interval_s * 1000)}ms"
    scrape: list[dict[str, Any]] = []
    named = dict(triton) if isinstance(triton, Mapping) else {str(i): url for i, url in enumerate(triton)}
    if named or triton_sd_file:
        paths = {address(url)[1] for url in named.values()}
        if len(paths) > 1:
            raise ValueError(f"Triton targets with different metrics paths {sorted(paths)}: one job has one path")
        job: dict[str, Any] = {"job_name": "triton", "metrics_path": paths.pop() if paths else "/metrics"}
        if named:
            job["static_configs"] = [{"targets": [address(url)[0]], "labels": {"replica": name}}
                                     for name, url in named.items()]
        if triton_sd_file:
            job["file_sd_configs"] = [{"files": [str(triton_sd_file)]}]
        scrape.append(job)
    if ray or ray_sd_file:
        job = {"job_name": "ray"}
        if ray:
            job["static_configs"] = [{"targets": [address(t)[0] for t in ray]}]
        if ray_sd_file:
            job["file_sd_configs"] = [{"files": [str(ray_sd_file)]}]
        scrape.append(job)
    for name, targets in (jobs or {}).items():
        scrape.append({"job_name": name, "static_configs": [{"targets": [address(t)[0] for t in targets]}]})
    config = {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
              "scrape_configs": scrape}
    return yaml.safe_dump(config, sort_keys=False)


def check_config(path: str | Path) -> str:
    """``promtool check config PATH``: its report, or :class:`PrometheusError` with it."""
    done = subprocess.run([binary("promtool"), "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    report = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise PrometheusError(f"promtool check config {path} failed (status {done.returncode}):\n{report}")
    return report


# --- results -------------------------------------------------------------------------------------

def to_frame(series: list[dict[str, Any]]):
    """:meth:`PrometheusServer.query` / ``query_range`` results as one row per sample (labels, ``time``,
    ``value``): a pandas DataFrame when pandas is installed (the tutorial's environment has none), else
    the list of row dicts."""
    rows = [{**s["labels"], "time": t, "value": v} for s in series
            for t, v in (s["values"] if "values" in s else [(s["time"], s["value"])])]
    try:
        import pandas  # noqa: PLC0415
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


def _seconds(when: float | datetime) -> float:
    return when.timestamp() if isinstance(when, datetime) else float(when)


# --- the server ----------------------------------------------------------------------------------

class PrometheusServer(ManagedServer):
    """One ``prometheus`` process in its own process group, on a free port of 127.0.0.1, with its TSDB
    in a temporary directory that :meth:`stop` removes. ``config``: the YAML text (:func:`render_config`)
    or, as a :class:`~pathlib.Path`, a file to read it from."""

    name = "prometheus"
    start_error = PrometheusError
    poll_s = 0.2

    def __init__(self, config: str | Path, *, retention: str = "1d"):
        super().__init__()
        self.config_text = Path(config).read_text() if isinstance(config, Path) else config
        self.retention = retention
        self.port = 0
        self.tmp: Path | None = None
        self.last_log = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ready_url(self) -> str:
        return f"{self.url}/-/ready"

    @property
    def config_path(self) -> Path:
        return self.tmp / "prometheus.yml"

    @property
    def cwd(self) -> Path | None:
        return self.tmp

    def argv(self) -> list[str]:
        return [binary("prometheus"), f"--config.file={self.config_path}", f"--storage.tsdb.path={self.tmp / 'data'}",
                f"--storage.tsdb.retention.time={self.retention}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle"]  # POST /-/reload after update_config

    def start(self, timeout_s: float = 60) -> "PrometheusServer":
        if self.process is not None:
            return self
        binary("prometheus")  # before anything is made: a missing binary leaves nothing behind
        self.tmp = Path(tempfile.mkdtemp(prefix="tutorial-prometheus-"))
        self.config_path.write_text(self.config_text)
        self.log_path = self.tmp / "prometheus.log"
        self.port = free_port()
        self.launch(timeout_s)
        return self

    def log_name(self) -> str:
        return "log"  # its folder goes at stop(): the messages carry the tail

    def log_tail(self, lines: int = 30) -> str:
        """The log's last ``lines`` lines; once stopped, what they were at the stop."""
        return super().log_tail(lines) if self.tmp is not None else self.last_log or "(no log)"

    def stop(self, grace_s: float = 10) -> None:
        """SIGTERM, wait up to ``grace_s``, SIGKILL what is left of the group, remove the directory."""
        try:
            super().stop(grace_s)
        finally:
            self.process = None
        if self.tmp is not None:
            self.last_log = self.log_tail()
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    # --- HTTP API ----------------------------------------------------------------------------------

    def _api(self, path: str, method: str = "GET", timeout_s: float = 30, **params) -> Any:
        r = requests.request(method, f"{self.url}/api/v1/{path}", params=params, timeout=timeout_s)
        try:
            body = r.json()
        except ValueError:
            raise PrometheusError(f"{path}: HTTP {r.status_code}: {r.text[:300]}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str, at: float | datetime | None = None) -> list[dict[str, Any]]:
        """An instant query: ``[{"labels": {...}, "time": t, "value": v}]`` (a scalar: one, without labels)."""
        params = {"query": promql} | ({"time": _seconds(at)} if at is not None else {})
        data = self._api("query", **params)
        if data["resultType"] in ("scalar", "string"):
            t, v = data["result"]
            return [{"labels": {}, "time": float(t), "value": float(v) if data["resultType"] == "scalar" else v}]
        return [{"labels": s["metric"], "time": float(s["value"][0]), "value": float(s["value"][1])}
                for s in data["result"]]

    def query_range(self, promql: str, start: float | datetime, end: float | datetime,
                    step: float | str = 1.0) -> list[dict[str, Any]]:
        """A range query: ``[{"labels": {...}, "values": [(t, v), ...]}]``."""
        data = self._api("query_range", query=promql, start=_seconds(start), end=_seconds(end), step=step)
        return [{"labels": s["metric"], "values": [(float(t), float(v)) for t, v in s["values"]]}
                for s in data["result"]]

    def targets(self) -> list[dict[str, Any]]:
        """The active targets: ``job``, ``instance``, ``health`` (up/down/unknown), ``lastError``, labels."""
        return [{"job": t["labels"].get("job"), "instance": t["labels"].get("instance"), "health": t["health"],
                 "lastError": t.get("lastError", ""), "labels": t["labels"]}
                for t in self._api("targets", state="active")["activeTargets"]]

    def wait_for_targets(self, jobs: Iterable[str] = (), timeout_s: float = 60) -> list[dict[str, Any]]:
        """Wait until every active target (of ``jobs``, which must each have one) has been scraped up."""
        jobs, start, last = set(jobs), time.monotonic(), []
        while time.monotonic() - start < timeout_s:
            last = self.targets()
            if last and jobs <= {t["job"] for t in last} and all(t["health"] == "up" for t in last):
                return last
            time.sleep(0.5)
        raise PrometheusError(f"targets not all up after {timeout_s:.0f} s (jobs wanted: {sorted(jobs)}): "
                              + "; ".join(f"{t['job']} {t['instance']} {t['health']} {t['lastError']}" for t in last))

    def update_config(self, config: str) -> None:
        """Replace the scrape config and reload it (``POST /-/reload``): new replicas, new targets."""
        self.config_text = config
        self.config_path.write_text(config)
        r = requests.post(f"{self.url}/-/reload", timeout=30)
        if r.status_code != 200:
            raise PrometheusError(f"reload failed: HTTP {r.status_code}: {r.text.strip()}")
