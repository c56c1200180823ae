"""What the JupyterLab tests share, besides the browser fixture (conftest.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM_INSTALL = "apt-get install -y --no-install-recommends chromium"


def lab_settings(folder: Path) -> None:
    """A user settings folder of the test's own: every cell in the DOM (windowing 'none'), no blank
    space after the last cell (scrollPastEnd pads the notebook by the viewport's height, which would
    grow with every resize of a screenshot), no news fetched from the internet, and no autosave (a
    notebook run in the page must never overwrite the committed file)."""
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "scrollPastEnd": False},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for rel, value in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


SERVER_START_TIMEOUT_S = 120


@contextmanager
def running_lab(cmd: list[str], env: dict[str, str], cwd: Path, log_path: Path, port: int, token: str):
    """``jupyter lab`` started in a session of its own, polled on 127.0.0.1:``port`` until its API
    answers (``pytest.fail`` with the log's tail if it exits or is not ready within
    SERVER_START_TIMEOUT_S); yields (base URL, seconds it took). Stopped by its handle: SIGTERM (the
    lab shuts its kernels down), then its whole session if it lingers."""
    with log_path.open("wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() - started > SERVER_START_TIMEOUT_S:
                    pytest.fail(f"jupyter lab not ready after {SERVER_START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.25)
            yield base, time.monotonic() - started
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the lab and any kernel it left
                proc.wait(timeout=30)


def shut_down_sessions(base: str, token: str) -> None:
    """Stop every kernel the lab runs (opening a notebook starts one), so the next test has the cores."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)
    for s in sessions:
        req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()
