"""scripts.paths: every build path lives under the one build directory, wherever that is."""
import json

import pytest

from scripts import paths


def test_every_build_path_is_under_the_build_dir(build_root):
    made = [paths.triton_repo_dir("cpu"), paths.reference_path(), paths.results_path("00_x"),
            paths.triton_backend_dir(), paths.triton_log_dir(), paths.triton_log_path(8000), paths.executed_dir("cpu"),
            paths.in_process_lib_dir(), paths.vllm_log_dir(), paths.bench_result_dir("cpu", smoke=True),
            paths.bench_result_dir("cpu", smoke=False), paths.lifecycle_dir()]
    assert all(p.is_relative_to(build_root) for p in made), made
    assert len(set(made)) == len(made)
    assert paths.reference_path() == build_root / "reference" / "greedy_reference.json"


def test_sources_are_in_the_repository():
    for source in (paths.PROFILES_FILE, paths.SERVE_CONFIG_DIR, paths.TEMPLATE_DIR, paths.NOTEBOOK_DIR,
                   paths.PYTHON_BASED_BACKENDS):
        assert source.exists() and source.is_relative_to(paths.REPO_ROOT), source
    assert (paths.PYTHON_BASED_BACKENDS / "vllm" / "model.py").is_file()


def test_shown_writes_machine_paths_the_same_everywhere(build_root):
    text = f"{build_root}/engine and {paths.REPO_ROOT}/env/profiles.toml"
    assert paths.shown(text) == "build/engine and env/profiles.toml"


def test_read_reference_names_notebook_03_when_the_reference_is_missing(build_root):
    with pytest.raises(FileNotFoundError, match="run notebook 03 first"):
        paths.read_reference()
    paths.reference_path().parent.mkdir(parents=True, exist_ok=True)
    paths.reference_path().write_text(json.dumps({"prompts": ["a"]}))
    assert paths.read_reference() == {"prompts": ["a"]}
