"""The response_threads comparison: one repository per count, each engine config differing in that
count alone, and the py-spy summary it prints."""
from pathlib import Path

import pytest

from scripts.bench import response_threads as rt
from scripts.engine.config import build_engine, read_engine_config
from scripts.profiles import load_profile
from scripts.triton.repository.fill import repository_facts, read_model_config

from fakes import install_model


def test_each_count_gets_a_repository_whose_engine_config_differs_in_that_count_alone(build_root, tiny_llama):
    profile = load_profile("cpu")
    install_model(tiny_llama, profile)
    build_engine(profile)
    base = read_engine_config(profile.path("engine_dir"))
    assert base["response_threads"] == profile["engine_response_threads"]
    repos = {n: rt.variant_repository(profile, n, build_root / "ab") for n in (0, 3)}
    for n, repo in repos.items():
        facts = repository_facts(repo)
        engine_dir = read_model_config(repo, facts.engine_model).parameters["engine_dir"].string_value
        assert engine_dir == str(build_root / "ab" / f"engine-{n}")
        assert read_engine_config(engine_dir) == base | {"response_threads": n}
        assert facts.decoupled  # the Serve repository's settings: streaming
    assert rt.label(3) == "response_threads 3"


@pytest.mark.parametrize("count", [-1, True, 2.0])
def test_a_count_that_is_not_a_whole_number_is_refused(build_root, count):
    with pytest.raises(ValueError, match="whole number"):
        rt.variant_repository(load_profile("cpu"), count, build_root)


def test_only_a_vllm_profile_has_the_setting(build_root):
    with pytest.raises(ValueError, match="runs tensorrt_llm"):
        rt.variant_repository(load_profile("gpu-trtllm"), 1, build_root)


def test_top_frames_sums_the_innermost_frames_of_py_spy_raw_stacks(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text("thread;main (a.py:1);send (b.py:2) 30\nthread;main (a.py:1);poll (c.py:3) 10\n"
                   "thread;other (a.py:9);send (b.py:2) 10\nnot a stack line\n")
    assert rt.top_frames(raw) == [("send (b.py:2)", 0.8), ("poll (c.py:3)", 0.2)]
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert rt.top_frames(empty) == []


def test_py_spy_is_found_where_its_wheel_put_it_when_it_is_not_on_path(monkeypatch):
    on_path = rt.py_spy_binary()
    assert on_path is not None  # the venv has it: ray[default] depends on it
    monkeypatch.setattr(rt.shutil, "which", lambda name: None)
    found = rt.py_spy_binary()
    assert found is not None and Path(found).resolve() == Path(on_path).resolve()
