"""How a vLLM engine inside Triton starts its processes (``engine_start_method``): the setting's way
from the profile into the engine config and ``model.json``, and the engine-args class that applies it."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from scripts.engine import config as engine
from scripts.engine.config import VLLM_OWN_KEYS, EngineConfigError, vllm_engine_args_class
from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile
from scripts.triton.repository.fill import standalone_arguments


def test_the_profiles_start_method_reaches_the_engine_config_and_model_json(build_root):
    profile = load_profile("cpu")
    settings = engine.engine_settings(profile)
    assert settings["start_method"] == profile["engine_start_method"]
    model_json = standalone_arguments(settings)
    assert model_json["start_method"] == settings["start_method"]
    from vllm import AsyncEngineArgs  # noqa: PLC0415

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    # what the backend passes on to vLLM is engine arguments only; the rest is ours
    assert set(model_json) - set(VLLM_OWN_KEYS) <= fields and not set(VLLM_OWN_KEYS) & fields


def test_an_unknown_start_method_is_refused_with_the_choices(build_root):
    with pytest.raises(EngineConfigError, match="'forkserver' is not one of spawn, fork"):
        engine.check_start_method("forkserver")


#: Builds engine configs in a fresh interpreter, as the Triton stub does: importing vLLM's worker and
#: config machinery in this long-lived test process would depend on what earlier tests imported. One
#: interpreter builds every case (vLLM's import is most of the time), each after setting the other method.
PROBE = """
import importlib, json, os, sys
from scripts.engine.config import vllm_engine_args_class
import vllm
import vllm.entrypoints.llm as llm_module
from scripts.engine.vllm_offline import llm_start_method
seen = {}
for case in sys.argv[2:]:
    method, where = case.split("-")
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork" if method == "spawn" else "spawn"
    if where == "offline":  # the class vllm.LLM builds, while llm_start_method is in force
        with llm_start_method(method):
            args_class = llm_module.EngineArgs
        restored = llm_module.EngineArgs is vllm.EngineArgs
    else:
        args_class, restored = vllm_engine_args_class(method), True
    config = args_class(model=sys.argv[1], dtype="bfloat16", max_model_len=128, enforce_eager=True).create_engine_config()
    module, _, name = config.parallel_config.worker_cls.rpartition(".")
    worker = getattr(importlib.import_module(module), name)
    seen[case] = {"method": os.environ["VLLM_WORKER_MULTIPROC_METHOD"], "worker_cls": config.parallel_config.worker_cls,
                  "bases": [f"{c.__module__}.{c.__name__}" for c in worker.__mro__],
                  "args_bases": [f"{c.__module__}.{c.__name__}" for c in args_class.__mro__], "restored": restored}
print(json.dumps(seen))
"""
CASES = [f"{method}-{where}" for method in ("fork", "spawn") for where in ("triton", "offline")]


@pytest.fixture(scope="module")
def engine_configs(tiny_llama) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tiny_llama), *CASES], capture_output=True,
                         text=True, timeout=300, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("where", ["triton", "offline"])
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_choice_is_made_after_vllms_cpu_platform_set_spawn(method, where, engine_configs):
    """vLLM's CPU platform sets spawn while it builds the config; the forking class sets fork after it,
    and names a worker of its own, a subclass of vLLM's CPU worker (which a spawned engine runs). The
    same holds for the engine arguments vllm.LLM builds (run.py, the offline benchmark) while
    llm_start_method is in force, and vLLM's own class is back after it."""
    seen = engine_configs[f"{method}-{where}"]
    assert seen["method"] == method and seen["restored"]
    base = "vllm.engine.arg_utils.AsyncEngineArgs" if where == "triton" else "vllm.engine.arg_utils.EngineArgs"
    assert base in seen["args_bases"]
    cpu_worker = "vllm.v1.worker.cpu_worker.CPUWorker"
    assert seen["worker_cls"] == (engine.FORKED_WORKER_CLS if method == "fork" else cpu_worker)
    assert cpu_worker in seen["bases"]


@pytest.mark.parametrize("environ, expected", [
    ({"OMP_NUM_THREADS": "2", "GOMP_CPU_AFFINITY": "2 3"}, (2, {2, 3})),                       # torch's libgomp
    ({"OMP_NUM_THREADS": "1", "OMP_PLACES": "{5}", "OMP_PROC_BIND": "true"}, (1, {5})),         # another runtime
    ({"OMP_NUM_THREADS": "2", "KMP_AFFINITY": "granularity=fine,explicit,proclist=[0,1]"}, (2, {0, 1})),  # Intel's
    ({}, (None, None)),                                                                          # nobind: nothing asked
])
def test_the_forked_worker_reads_the_binding_vllm_sets_for_a_spawned_one(environ, expected):
    from scripts.engine.omp import omp_binding

    assert omp_binding(environ) == expected


def test_the_binding_confines_the_thread_and_sets_torchs_thread_count():
    """Applied in a child process of its own, as in the forked worker (the test process keeps its CPUs)."""
    import multiprocessing  # noqa: PLC0415

    cpu = min(os.sched_getaffinity(0))
    with multiprocessing.get_context("fork").Pool(1) as pool:
        threads, cpus, affinity, torch_threads = pool.apply(_bind_in_child, ({"OMP_NUM_THREADS": "1", "GOMP_CPU_AFFINITY": str(cpu)},))
    assert (threads, cpus, affinity, torch_threads) == (1, {cpu}, {cpu}, 1)


def _bind_in_child(environ):
    import torch  # noqa: PLC0415

    from scripts.engine.omp import bind_like_a_spawned_worker  # noqa: PLC0415

    threads, cpus = bind_like_a_spawned_worker(environ)
    return threads, cpus, os.sched_getaffinity(0), torch.get_num_threads()
