"""Every import path a reader is shown resolves: the README's commands, the Serve configs'
``import_path``, the console scripts and the ``python -m`` targets."""
from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from scripts.paths import REPO_ROOT, SERVE_CONFIG_DIR

README = (REPO_ROOT / "README.md").read_text()
DOCS = README + "".join(p.read_text() for p in sorted((REPO_ROOT / "docs").glob("*.md")) if (REPO_ROOT / "docs").is_dir())
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def resolve(target: str) -> object:
    """``pkg.module:attr`` or ``pkg.module``."""
    module, _, attr = target.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attr) if attr else loaded


def module_targets(text: str) -> set[str]:
    return set(re.findall(r"python3? -m (scripts(?:\.\w+)+)", text))


def colon_targets(text: str) -> set[str]:
    return set(re.findall(r"\b(scripts(?:\.\w+)+:\w+)", text))


def test_the_docs_name_some_targets():
    assert module_targets(DOCS) and colon_targets(DOCS)


@pytest.mark.parametrize("target", sorted(module_targets(DOCS)))
def test_python_m_targets_in_the_docs_are_runnable_modules(target):
    module = resolve(target)
    has_main = hasattr(module, "main") or importlib.util.find_spec(f"{target}.__main__") is not None
    assert has_main, f"`python -m {target}` would do nothing: it has no main()"


@pytest.mark.parametrize("target", sorted(colon_targets(DOCS)))
def test_import_paths_in_the_docs_resolve(target, tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(tmp_path))
    try:
        assert resolve(target) is not None
    except FileNotFoundError as exc:  # an application that needs the notebooks' build says which
        assert "run notebooks" in str(exc), exc


@pytest.mark.parametrize("config", sorted(SERVE_CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_serve_configs_import_paths_resolve(config):
    for app in yaml.safe_load(config.read_text())["applications"]:
        assert callable(resolve(app["import_path"]))


@pytest.mark.parametrize("name,target", sorted(PYPROJECT["project"]["scripts"].items()))
def test_console_scripts_resolve_and_follow_one_scheme(name, target):
    assert name.startswith("tutorial-") and re.fullmatch(r"[a-z0-9-]+", name), name
    assert callable(resolve(target))
    module = target.split(":")[0]
    source = importlib.util.find_spec(module).origin
    text = open(source).read()
    assert 'if __name__ == "__main__"' in text or module.endswith(".cli"), f"{module} is no `python -m` target"


def test_every_tool_the_readme_lists_is_a_console_script():
    declared = {t.split(":")[0] for t in PYPROJECT["project"]["scripts"].values()}
    for target in module_targets(README):
        assert target in declared or f"{target}.cli" in declared, f"{target} has no console script"


def dotted_names_in_prose() -> set[str]:
    import json

    from scripts.paths import NOTEBOOK_DIR

    texts = [DOCS] + ["".join(c["source"]) for nb in sorted(NOTEBOOK_DIR.glob("*.ipynb"))
                      for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "markdown"]
    return {m for text in texts for m in re.findall(r"`(scripts(?:\.\w+)+)", text)}


def resolve_dotted(name: str) -> object:
    """``a.b.c`` as a module, or as an attribute of the longest importable prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


@pytest.fixture(scope="module")
def unresolved_prose_names() -> dict[str, str]:
    """The cited names that do not resolve, each with its error, found in one fresh interpreter: as a
    reader imports them, and apart from what earlier tests imported into this process (setuptools'
    distutils shim, which vLLM's worker reaches through torch, refuses a process that has loaded the
    standard library's distutils first)."""
    code = ("import json, sys\n"
            "from tests.unit.test_entry_points import resolve_dotted\n"
            "bad = {}\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        assert resolve_dotted(name) is not None\n"
            "    except Exception as exc:\n"
            "        bad[name] = f'{type(exc).__name__}: {exc}'\n"
            "print(json.dumps(bad))\n")
    out = subprocess.run([sys.executable, "-c", code, *sorted(dotted_names_in_prose())], capture_output=True, text=True,
                         timeout=300, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(dotted_names_in_prose()))
def test_names_the_prose_cites_exist(name, unresolved_prose_names):
    assert name not in unresolved_prose_names, unresolved_prose_names[name]
