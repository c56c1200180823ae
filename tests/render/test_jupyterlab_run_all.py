"""Issue 43: notebooks 00-03 run in JupyterLab as a reader runs them, Run All in a real browser.

``jupyter lab notebooks/`` is started from the repository root as the README says, with the
environment of the user who runs this test, less what ``make`` adds (the venv's ``bin`` on ``PATH``,
``LC_ALL``, ``PYTHONUNBUFFERED``): a reader who types the README's command has not activated the venv.
So the kernel gets the working directory (``notebooks/``) and the environment a reader's kernel gets.
Each notebook is opened in headless Chromium, its outputs cleared (Edit > Clear Outputs of All Cells),
then run with Run > Run All Cells; the test waits until the kernel is idle with no cell queued and
checks that every code cell ran and none shows a traceback. Nothing is saved: autosave is off in the
lab's settings, so the committed files stay as they are. A screenshot of each run goes to
build/screenshots/run-all-NAME.png.

``.ci/run`` runs it as an ordinary user in a clone of that user's own (``make test-render``); run as
root it works too (``--allow-root``), but says less.
"""
from __future__ import annotations

import os
import re
import secrets
import sys
import time
from pathlib import Path

import pytest

from labkit import lab_settings, running_lab, shut_down_sessions
from scripts.paths import NOTEBOOK_DIR, REPO_ROOT, build_dir
from scripts.procs.ports import free_port

#: The notebooks a reader runs first, in order (each reads what the one before wrote in build/).
RUN_ALL = [p for p in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")) if p.name[:2] in ("00", "01", "02", "03")]
#: A whole notebook's run; nbval allows 900 s a cell, and none of these four has a cell near that.
RUN_ALL_TIMEOUT_S = 900
PAGE_TIMEOUT_MS = 90_000
#: What ``make`` adds to the environment that a reader's shell does not have.
MAKE_ONLY = ("LC_ALL", "PYTHONUNBUFFERED", "PYTHONPATH")

STATE_JS = """() => {
  const cells = Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell'));
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return {
    prompts: cells.map(c => (c.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent.trim()),
    tracebacks: cells.map((c, i) => Array.from(c.querySelectorAll(
        '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]')).some(e => e.textContent.includes('Traceback')) ? i : -1)
      .filter(i => i >= 0),
    status: indicator ? indicator.getAttribute('data-status') : null,
    dialogs: Array.from(document.querySelectorAll('.jp-Dialog')).map(d => d.innerText.slice(0, 300)),
  };
}"""
NUMBERED = re.compile(r"^\[\d+\]:$")


def reader_environment(venv_bin: Path) -> dict[str, str]:
    """This process's environment as the reader's shell has it: without what ``make`` exports."""
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ONLY}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != venv_bin.resolve())
    return env


def run_all_problems(state: dict) -> list[str]:
    """What a finished Run All shows that it should not: a cell that did not run, a traceback, a dialog."""
    problems = [f"code cell {i} did not run (prompt {p!r})" for i, p in enumerate(state["prompts"]) if not NUMBERED.match(p)]
    problems += [f"code cell {i} shows a traceback" for i in state["tracebacks"]]
    problems += [f"dialog: {d!r}" for d in state["dialogs"]]
    return problems


def finished(state: dict, started: bool) -> bool:
    """Run All is over: it started, the kernel is idle and no cell is queued or running."""
    return started and state["status"] == "idle" and not any(p == "[*]:" for p in state["prompts"])


@pytest.fixture(scope="module")
def reader_lab(tmp_path_factory):
    """``jupyter lab notebooks/`` from the repository root, as the README says: (base URL, token)."""
    tmp = tmp_path_factory.mktemp("jupyterlab-run-all")
    lab_settings(tmp / "settings")
    port, token = free_port(), secrets.token_hex(16)
    venv_bin = Path(sys.executable).parent
    env = reader_environment(venv_bin) | {"JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
                                          "JUPYTER_CONFIG_DIR": str(tmp / "config")}
    cmd = [str(venv_bin / "jupyter"), "lab", "notebooks/", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--LabApp.user_settings_dir={tmp / 'settings'}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = tmp / "jupyter.log"
    with running_lab(cmd, env, REPO_ROOT, log_path, port, token) as (base, _):
        yield base, token, log_path


def _menu(page, menu: str, item: str) -> None:
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


@pytest.mark.parametrize("notebook", RUN_ALL, ids=[p.stem for p in RUN_ALL])
def test_run_all_in_jupyterlab_as_a_reader(notebook: Path, reader_lab, browser):
    base, token, log_path = reader_lab
    shots = build_dir() / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    try:
        page.goto(f"{base}/lab/tree/{notebook.name}?reset&token={token}", wait_until="domcontentloaded")
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=PAGE_TIMEOUT_MS)
        page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=PAGE_TIMEOUT_MS)
        page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.click()  # the notebook has the focus
        _menu(page, "Edit", "Clear Outputs of All Cells")
        page.wait_for_function("() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt'))"
                               ".every(p => !/\\d/.test(p.textContent))", timeout=PAGE_TIMEOUT_MS)
        _menu(page, "Run", "Run All Cells")
        began, started = time.monotonic(), False
        while True:
            state = page.evaluate(STATE_JS)
            started = started or any(p != "[ ]:" for p in state["prompts"])
            if finished(state, started) or state["dialogs"]:
                break
            if time.monotonic() - began > RUN_ALL_TIMEOUT_S:
                pytest.fail(f"{notebook.name}: Run All not finished after {RUN_ALL_TIMEOUT_S} s; prompts {state['prompts']}, "
                            f"kernel {state['status']}; the lab's log ends:\n{log_path.read_text()[-2000:]}")
            time.sleep(1)
        seconds = time.monotonic() - began
        page.screenshot(path=str(shots / f"run-all-{notebook.stem}.png"), full_page=True)
    finally:
        context.close()
        shut_down_sessions(base, token)
    problems = run_all_problems(state) + [f"uncaught page error: {e[:300]}" for e in page_errors]
    print(f"{notebook.stem}: Run All in {seconds:.0f} s as uid {os.geteuid()}, {len(state['prompts'])} code cells")
    assert not problems, f"{notebook.name} (Run All in JupyterLab):\n" + "\n".join(problems)


# --- the checks can fail -----------------------------------------------------------------------------

def test_a_cell_that_did_not_run_or_raised_fails_the_run():
    ok = {"prompts": ["[1]:", "[2]:"], "tracebacks": [], "status": "idle", "dialogs": []}
    assert run_all_problems(ok) == [] and finished(ok, started=True) and not finished(ok, started=False)
    stopped = {"prompts": ["[1]:", "[ ]:"], "tracebacks": [0], "status": "idle", "dialogs": []}
    assert run_all_problems(stopped) == ["code cell 1 did not run (prompt '[ ]:')", "code cell 0 shows a traceback"]
    assert not finished({**ok, "prompts": ["[1]:", "[*]:"]}, started=True)


def test_the_reader_environment_has_nothing_make_adds(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), "/usr/bin"]))
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    env = reader_environment(tmp_path)
    assert env["PATH"] == "/usr/bin" and "LC_ALL" not in env
