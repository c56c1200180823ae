"""The notebooks stay thin and profile-neutral: checked on their code cells, without running them.

* no function or class definitions (a helper lives once in ``scripts/``, with a unit test), except
  a Serve deployment class that is itself the lesson (decorated with ``@serve.deployment``);
* no profile-specific literal outside the ``parameters`` cell: profile names, engine names, engine
  model names, served model names and expected texts come from ``env/profiles.toml``;
* every ``scripts`` import resolves.
"""
from __future__ import annotations

import ast
import importlib
import json

import pytest

from scripts.paths import NOTEBOOK_DIR
from scripts.profiles import available_profiles, load_profile
from scripts.triton.repository.fill import ENGINE_MODEL

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
TEXT_KEYS = ("probe_continuation", "served_model_name", "standalone_model")


def code_cells(path):
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"]), c["metadata"].get("tags", [])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def parse(source: str) -> ast.Module:
    # top-level `await` is fine in a notebook cell: parse it the way IPython runs it
    return compile(source, "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def profile_literals() -> set[str]:
    found = set(ENGINE_MODEL) | set(ENGINE_MODEL.values())
    for name in available_profiles():
        profile = load_profile(name)
        found |= {name, profile.engine}
        found |= {str(profile.get(key)) for key in TEXT_KEYS if profile.get(key)}
    return found


def offending_literals(tree: ast.AST, literals: set[str]) -> list[str]:
    return sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                   and isinstance(node.value, str) and node.value.strip() and node.value in literals})


def definitions(tree: ast.AST) -> list[str]:
    """Names of the functions, lambdas and classes defined in ``tree``; a class decorated with
    ``@serve.deployment`` is the lesson itself, so neither it nor its methods count."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ClassDef):
            if any(ast.unparse(d).startswith(("serve.deployment", "serve.ingress")) for d in node.decorator_list):
                continue
            out.append(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(node.name)
        elif isinstance(node, ast.Lambda):
            out.append("lambda")
        todo.extend(ast.iter_child_nodes(node))
    return sorted(out)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_helpers_defined_in_notebooks(path):
    found = {i: d for i, src, _ in code_cells(path) if (d := definitions(parse(src)))}
    assert not found, f"{path.name}: move these into scripts/ (cell index: names): {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_profile_specific_literals_outside_parameters(path):
    literals = profile_literals()
    found = {i: f for i, src, tags in code_cells(path)
             if "parameters" not in tags and (f := offending_literals(parse(src), literals))}
    assert not found, f"{path.name}: read these from the profile instead (cell index: literals): {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_scripts_imports_resolve(path):
    for _, src, _ in code_cells(path):
        for node in ast.walk(parse(src)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scripts"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        importlib.import_module(f"{node.module}.{alias.name}")  # a submodule


def test_the_scans_catch_what_they_look_for():
    tree = parse('load_profile("cpu")\ndef helper():\n    pass\nf = lambda x: x\n')
    assert offending_literals(tree, profile_literals()) == ["cpu"]
    assert definitions(tree) == ["helper", "lambda"]
    lesson = parse("@serve.deployment\nclass Ok:\n    def __call__(self, r):\n        return 'ok'\n")
    assert definitions(lesson) == []
