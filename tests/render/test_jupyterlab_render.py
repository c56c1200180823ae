"""Issue 32: every notebook opens in JupyterLab, in a real browser, as committed.

A module fixture starts ``jupyter lab`` on a free port of 127.0.0.1 with a random token and a user
settings folder of its own (windowing mode 'none', so every cell is in the DOM; no news fetched);
each test opens one notebook in headless Chromium (Debian's ``chromium``, driven by Playwright; no
browser is downloaded) and compares what the page shows with the file: one cell element per cell,
per cell the images the file's outputs hold (a missing plot fails), tracebacks only where the file
has them, no dialog, no renderer error, no console error but the benign ones listed below. A
screenshot of the whole notebook goes to build/screenshots/NAME.png (NAME-2.png ... past 16000 px).

``make test-render`` runs it (it installs Debian's chromium first, as root); ``make test`` does not.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.paths import NOTEBOOK_DIR, REPO_ROOT, build_dir
from scripts.procs.ports import free_port

from labkit import lab_settings, running_lab, shut_down_sessions

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
RENDER_TIMEOUT_MS = 90_000
MIN_SCREENSHOT_BYTES = 20_000
#: Chromium's largest screenshot without tiling artefacts is about 16384 px; a longer notebook goes on in NAME-2.png ...
MAX_SCREENSHOT_HEIGHT = 16_000

#: Mime types JupyterLab's standard renderers rank above images: an output carrying one of them
#: shows that instead of its image (@jupyterlab/rendermime's standardRendererFactories order).
RANKED_ABOVE_IMAGES = ("text/html", "text/markdown", "text/latex", "image/svg+xml")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")

#: Console errors a healthy page logs, each with why it is harmless (matched as substrings). With
#: JupyterLab 4.6.6 and Debian's Chromium 150 the nine notebooks log none: the news fetch, which
#: would fail offline, is off in the settings below. A new benign one goes here with its reason.
BENIGN_CONSOLE_ERRORS: dict[str, str] = {}
#: Paths that may answer 404, each with why; any other 404 (an image under /files, a lab asset) fails.
#: None does today.
BENIGN_404_PATHS: dict[str, str] = {}


@dataclass(frozen=True)
class Expected:
    """What the page must show for one notebook file, cell by cell."""

    cell_types: list[str]
    images: list[int]         # per cell: outputs JupyterLab renders as an <img> (png/jpeg/gif shown)
    tracebacks: list[bool]    # per cell: an error output, or stderr that holds a traceback


def expected_from_notebook(nb: dict) -> Expected:
    images, tracebacks = [], []
    for cell in nb["cells"]:
        n_img, tb = 0, False
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if any(t in data for t in IMAGE_TYPES) and not any(t in data for t in RANKED_ABOVE_IMAGES):
                n_img += 1
            if out["output_type"] == "error":
                tb = True
            elif out["output_type"] == "stream" and out.get("name") == "stderr" and "Traceback" in "".join(out["text"]):
                tb = True
        images.append(n_img)
        tracebacks.append(tb)
    return Expected([c["cell_type"] for c in nb["cells"]], images, tracebacks)


def render_problems(expected: Expected, shown: list[dict]) -> list[str]:
    """Differences between the file and the page (``shown``: one dict per cell element, in order,
    with ``type``, ``images`` (loaded <img> of .jp-RenderedImage) and ``traceback``)."""
    if len(shown) != len(expected.cell_types):
        return [f"{len(shown)} cells rendered, the file has {len(expected.cell_types)}"]
    problems = []
    for i, (cell, ctype, n_img, tb) in enumerate(zip(shown, expected.cell_types, expected.images, expected.tracebacks)):
        if cell["type"] != ctype:
            problems.append(f"cell {i}: rendered as {cell['type']}, the file has a {ctype} cell")
        if cell["images"] != n_img:
            problems.append(f"cell {i}: {cell['images']} image(s) rendered, the file has {n_img} (a missing plot?)")
        if cell["traceback"] and not tb:
            problems.append(f"cell {i}: a traceback is shown that the committed notebook does not have")
        if tb and not cell["traceback"]:
            problems.append(f"cell {i}: the committed traceback is not shown")
    return problems


def unexpected_console_errors(errors: list[str], failed_urls: list[str]) -> list[str]:
    bad = [e for e in errors if not any(b in e for b in BENIGN_CONSOLE_ERRORS)]
    bad += [f"404 {u}" for u in failed_urls if not any(u.split("?")[0].endswith(p) for p in BENIGN_404_PATHS)]
    return bad


# --- fixtures -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over the repository: (base URL, token). Stopped by its handle."""
    tmp = tmp_path_factory.mktemp("jupyterlab")
    lab_settings(tmp / "settings")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_CONFIG_DIR=str(tmp / "config"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           # ServerApp.token is deprecated since jupyter_server 2.0 (it warns); IdentityProvider.token is its name now
           f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={REPO_ROOT}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
           f"--LabApp.workspaces_dir={tmp / 'workspaces'}"]
    if os.geteuid() == 0:  # CI containers and this project's dev machines run as root; the lab refuses without it
        cmd.append("--allow-root")
    with running_lab(cmd, env, REPO_ROOT, tmp / "jupyter.log", port, token) as (base, seconds):
        TIMINGS["jupyter_lab_start_s"] = round(seconds, 2)
        yield base, token


TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def screenshot_dir():
    out = build_dir() / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    yield out
    (out / "timings.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")


# --- the page ---------------------------------------------------------------------------------------

CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')).map(c => ({
  type: c.classList.contains('jp-CodeCell') ? 'code' : c.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw',
  images: Array.from(c.querySelectorAll('.jp-RenderedImage img')).filter(i => i.complete && i.naturalWidth > 0).length,
  traceback: Array.from(c.querySelectorAll('.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]'))
               .some(e => e.textContent.includes('Traceback')),
}))"""

RENDERED_JS = """([n, images]) => {
  const cells = document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell');
  if (cells.length !== n) return false;
  const loaded = Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-RenderedImage img'))
                      .filter(i => i.complete && i.naturalWidth > 0).length;
  const md = document.querySelectorAll('.jp-NotebookPanel .jp-MarkdownCell').length;
  const mdDone = document.querySelectorAll('.jp-NotebookPanel .jp-MarkdownCell .jp-RenderedMarkdown').length;
  return loaded >= images && mdDone >= md;
}"""

SCROLL_JS = """async () => {
  for (const c of document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')) {
    c.scrollIntoView({block: 'start'});
    await new Promise(r => requestAnimationFrame(r));
  }
  const outer = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
  if (outer) outer.scrollTop = 0;
}"""

OVERFLOW_JS = """() => {
  const outer = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
  return outer ? outer.scrollHeight - outer.clientHeight : 0;
}"""

SCROLL_BY_JS = """(step) => {
  const outer = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
  if (!outer) return 0;
  const before = outer.scrollTop;
  outer.scrollTop = before + step;
  return outer.scrollTop - before;
}"""

RENDER_ERROR_TEXTS = ("Javascript Error:", "No renderer could be found for output", "Error rendering")


def open_in_lab(browser, base: str, token: str, path: Path, expected: Expected, shot: Path,
                wait_for: Expected | None = None) -> list[str]:
    """Open ``path`` (under the repository) in JupyterLab, save a screenshot of the whole notebook
    to ``shot``, and return every way the page differs from ``expected`` or shows an error.
    ``wait_for``: what the page should reach before it is compared (default ``expected``)."""
    wait_for = wait_for or expected
    rel = path.relative_to(REPO_ROOT).as_posix()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console_errors, failed, page_errors = [], [], []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    page.on("response", lambda r: failed.append(r.url.replace(base, "")) if r.status == 404 else None)
    try:
        page.goto(f"{base}/lab/tree/{rel}?reset&token={token}", wait_until="domcontentloaded")
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=RENDER_TIMEOUT_MS)
        try:
            page.wait_for_function(RENDERED_JS, arg=[len(wait_for.cell_types), sum(wait_for.images)],
                                   timeout=RENDER_TIMEOUT_MS, polling=250)
        except Exception:  # noqa: BLE001 - the comparison below says what is missing
            pass
        page.evaluate(SCROLL_JS)
        page.wait_for_timeout(300)  # layout after scrolling
        shown = page.evaluate(CELLS_JS)
        text = page.inner_text(".jp-NotebookPanel .jp-Notebook")
        dialogs = [page.inner_text(d) for d in page.query_selector_all(".jp-Dialog")]

        # the whole notebook in one picture: grow the viewport until the notebook no longer scrolls
        view = 1000
        for _ in range(4):
            hidden = page.evaluate(OVERFLOW_JS)
            if hidden <= 0 or view >= MAX_SCREENSHOT_HEIGHT:
                break
            view = min(view + hidden + 50, MAX_SCREENSHOT_HEIGHT)
            page.set_viewport_size({"width": 1400, "height": view})
            page.wait_for_timeout(400)
        page.screenshot(path=str(shot), full_page=True)
        # a notebook taller than that goes on in NAME-2.png, NAME-3.png ...: the notebook scrolled by a viewport each
        for part in range(2, 10):
            if page.evaluate(SCROLL_BY_JS, view - 150) <= 0:
                break
            page.wait_for_timeout(300)
            page.screenshot(path=str(shot.with_name(f"{shot.stem}-{part}.png")), full_page=True)
    finally:
        context.close()
        shut_down_sessions(base, token)
    shot.with_suffix(".console.json").write_text(json.dumps(
        {"console_errors": console_errors, "not_found": failed, "page_errors": page_errors}, indent=2) + "\n")

    problems = render_problems(expected, shown)
    problems += [f"renderer error in the page: {t!r}" for t in RENDER_ERROR_TEXTS if t in text]
    problems += [f"dialog: {d[:300]!r}" for d in dialogs]
    problems += [f"uncaught page error: {e[:300]}" for e in page_errors]
    problems += [f"console error: {e[:300]}" for e in unexpected_console_errors(console_errors, failed)]
    return problems


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_renders_in_jupyterlab(notebook, lab, browser, screenshot_dir):
    base, token = lab
    started = time.monotonic()
    shot = screenshot_dir / f"{notebook.stem}.png"
    problems = open_in_lab(browser, base, token, notebook, expected_from_notebook(json.loads(notebook.read_text())), shot)
    TIMINGS[notebook.stem] = round(time.monotonic() - started, 2)
    if problems:  # kept beside the screenshot: a CI artefact says what failed without the log
        shot.with_suffix(".problems.txt").write_text("\n".join(problems) + "\n")
    assert not problems, f"{notebook.name}:\n" + "\n".join(problems)
    assert shot.stat().st_size > MIN_SCREENSHOT_BYTES, f"{shot} is {shot.stat().st_size} bytes: a blank page?"


def test_a_copy_without_its_plot_fails_in_the_browser(lab, browser, screenshot_dir):
    """End to end: a copy of notebook 08 whose image/png output is removed, opened in the lab and
    held against the committed file, is reported as a missing plot."""
    base, token = lab
    source = NOTEBOOK_DIR / "08_model_lifecycle.ipynb"
    nb = json.loads(source.read_text())
    committed = expected_from_notebook(nb)
    assert sum(committed.images) >= 1
    for cell in nb["cells"]:
        cell["outputs"] = [o for o in cell.get("outputs", []) if "image/png" not in o.get("data", {})] \
            if cell["cell_type"] == "code" else cell.get("outputs")
        if cell["cell_type"] != "code":
            cell.pop("outputs", None)
    copy = build_dir() / "render-copies" / source.name  # under the lab's root (build/ is gitignored)
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(json.dumps(nb, indent=1))
    try:
        # wait for what the copy holds (no image), so the wait does not run into its timeout
        problems = open_in_lab(browser, base, token, copy, committed, screenshot_dir / "negative-08-without-plot.png",
                               wait_for=expected_from_notebook(nb))
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    assert any("a missing plot?" in p for p in problems), problems


# --- the comparison can fail --------------------------------------------------------------------

def _shown_as_committed(expected: Expected) -> list[dict]:
    return [{"type": t, "images": i, "traceback": tb}
            for t, i, tb in zip(expected.cell_types, expected.images, expected.tracebacks)]


def test_a_removed_image_output_is_a_missing_plot():
    """A page that shows notebook 07 as committed passes; the same page against a copy of the file
    without one image/png output (or a page without one of the images) fails."""
    nb = json.loads((NOTEBOOK_DIR / "07_benchmark_and_monitor.ipynb").read_text())
    committed = expected_from_notebook(nb)
    assert sum(committed.images) >= 1 and render_problems(committed, _shown_as_committed(committed)) == []

    (i, cell) = next((i, c) for i, c in enumerate(nb["cells"]) if any("image/png" in o.get("data", {}) for o in c.get("outputs", [])))
    page_as_committed = _shown_as_committed(committed)
    cell["outputs"] = [o for o in cell["outputs"] if "image/png" not in o.get("data", {})]
    problems = render_problems(expected_from_notebook(nb), page_as_committed)
    assert problems and f"cell {i}:" in problems[0] and "image(s) rendered" in problems[0]

    page_missing_plot = _shown_as_committed(committed)
    page_missing_plot[i]["images"] -= 1
    assert any("a missing plot?" in p for p in render_problems(committed, page_missing_plot))


def test_an_unexpected_traceback_or_console_error_fails():
    committed = expected_from_notebook(json.loads((NOTEBOOK_DIR / "00_check_environment.ipynb").read_text()))
    page = _shown_as_committed(committed)
    page[0]["traceback"] = True
    assert any("traceback is shown" in p for p in render_problems(committed, page))
    assert unexpected_console_errors(["TypeError: x is undefined"], []) == ["TypeError: x is undefined"]
    assert unexpected_console_errors([], ["/files/notebooks/plot.png"]) == ["404 /files/notebooks/plot.png"]
