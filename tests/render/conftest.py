"""The browser the JupyterLab tests drive: Debian's Chromium through Playwright (never downloaded)."""
from __future__ import annotations

import shutil

import pytest

from labkit import CHROMIUM_INSTALL


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.fail(f"Debian's chromium is not on PATH; as root run: {CHROMIUM_INSTALL} "
                    "(or `make test-render`, which does). This test never downloads a browser.")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()
