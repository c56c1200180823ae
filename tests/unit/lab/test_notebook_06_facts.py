"""Notebook 06 takes what depends on the cluster and on the engine's backend from the library, not literals:
the accelerator_type the picky replica asks for, and how section 9 estimates, loads and checks instances."""
import ast
import json

from scripts.capacity import Cluster, Node, absent_accelerator_type
from scripts.paths import NOTEBOOK_DIR

NOTEBOOK = NOTEBOOK_DIR / "06_troubleshoot_gpu_resources.ipynb"


def cells():
    nb = json.loads(NOTEBOOK.read_text())["cells"]
    return [("".join(c["source"]), c["metadata"].get("tags", [])) for c in nb if c["cell_type"] == "code"]


def calls(source, name):
    tree = compile(source, "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == name]


def keyword(call, key):
    return next((ast.unparse(k.value) for k in call.keywords if k.arg == key), None)


def test_the_missing_accelerator_is_derived_from_the_cluster():
    params = next(src for src, tags in cells() if "parameters" in tags)
    (default,) = [ast.literal_eval(n.value) for n in ast.parse(params).body
                  if isinstance(n, ast.Assign) and [t.id for t in n.targets] == ["MISSING_ACCELERATOR"]]
    a100_host = Cluster((Node("gpu", 8, 1, resources={"accelerator_type:A100": 1.0}),))
    # the default must be absent on an A100 host too, where the picky replica would otherwise run
    assert absent_accelerator_type(a100_host, default) not in a100_host.accelerator_types()
    code = "\n".join(src for src, _ in cells())
    assert len(calls(code, "absent_accelerator_type")) == 1 and "MISSING_ACCELERATOR}" not in code


def test_section_9_follows_the_engines_backend():
    code = "\n".join(src for src, _ in cells())
    loads = calls(code, "load_triton")
    assert loads and all(keyword(c, "instances_in") == "backend.instances_in" for c in loads)
    own = [c for name in ("triton_instance_memory", "safe_kv_fraction") for c in calls(code, name)
           if c.args and ast.unparse(c.args[0]) == "own_engine"]
    assert own and all(keyword(c, "parallel_loading") == "backend.parallel_loading" for c in own)
    assert "backend.gpu_processes(INSTANCE_COUNT)" in code and "instance_bytes) == INSTANCE_COUNT" not in code
