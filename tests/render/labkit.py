"""What the JupyterLab tests share, besides the browser fixture (conftest.py)."""
from __future__ import annotations

import json
from pathlib import Path

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
