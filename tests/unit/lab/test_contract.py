"""scripts.lab.contract: the contract file's pins and tests, the overlay and what it imports."""
import pytest

from scripts.lab import contract as c


def test_the_gpu_trtllm_contract_names_existing_tests_and_pins_transformers_4_47():
    gpu = c.read_contract("gpu-trtllm")
    assert gpu.pins["transformers"].startswith("4.47.") and "tests/contract" in gpu.tests
    assert len(gpu.tests) == len(set(gpu.tests)) > 5


def test_bad_contract_files_are_refused_with_the_line(tmp_path):
    (tmp_path / "p.txt").write_text("transformers>=4.47\n# test: tests/contract\n")
    with pytest.raises(ValueError, match=r"p.txt:1: 'transformers>=4.47' is not a pin"):
        c.read_contract("p", tmp_path)
    (tmp_path / "p.txt").write_text("transformers==4.47.1\n# test: tests/nowhere\n")
    with pytest.raises(ValueError, match="p.txt:2: the test 'tests/nowhere' does not exist"):
        c.read_contract("p", tmp_path)
    (tmp_path / "p.txt").write_text("transformers==4.47.1\n")
    with pytest.raises(ValueError, match="no pin or no test"):
        c.read_contract("p", tmp_path)
    with pytest.raises(FileNotFoundError, match="no contract for profile 'q'.*'p'"):
        c.read_contract("q", tmp_path)


def test_an_overlay_comes_first_for_the_tests(tmp_path, monkeypatch, build_root):
    """A site holding a package's dist-info is what the tests' interpreter finds (a tiny stand-in
    distribution, so that no download is needed here; `make test-contract` installs the real pins)."""
    contract = c.Contract("demo", {"contract-demo-pkg": "1.2.3"}, ("tests/contract",))
    assert c.missing_pins(contract) == {"contract-demo-pkg": "1.2.3"}
    info = contract.site / "contract_demo_pkg-1.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: contract-demo-pkg\nVersion: 1.2.3\n")
    assert c.missing_pins(contract) == {} and c.installed(contract.site) == {"contract-demo-pkg": "1.2.3"}
    assert c.in_effect(contract) == {"contract-demo-pkg": "1.2.3"}
    env = c.environment(contract, {"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].split(":") == [str(contract.site), str(c.REPO_ROOT), "/x"] and env[c.CONTRACT_ENV] == "demo"


def test_notebook_lines_name_a_notebook_and_the_error_of_its_boundary(tmp_path):
    gpu = c.read_contract("gpu-trtllm")
    from scripts.lab.run_notebooks import plan

    # every notebook the runner plans for the profile, in its order
    assert [name for name, _ in gpu.notebooks] == [p.stem for p in plan("gpu-trtllm")[0]]
    assert dict(gpu.notebooks)["01_build_engine"] and dict(gpu.notebooks)["02_fill_model_repository"] == ""
    (tmp_path / "p.txt").write_text("x==1\n# test: tests/contract\n# notebook: 99_nothing | some error\n")
    with pytest.raises(ValueError, match=r"p.txt:3: '# notebook: NAME \[\| ERROR TEXT\]' names no notebook"):
        c.read_contract("p", tmp_path)


def _executed(tmp_path, cells):
    import json
    path = tmp_path / "07_demo.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_an_executed_copy_says_where_it_stopped_and_whether_that_is_the_boundary(tmp_path):
    md = {"cell_type": "markdown", "source": "# x"}
    ok = {"cell_type": "code", "execution_count": 1, "outputs": [{"output_type": "stream", "text": "fine"}]}
    failed = {"cell_type": "code", "execution_count": 2,
              "outputs": [{"output_type": "error", "ename": "AssertionError", "evalue": "{'exists': False}"}]}
    never = {"cell_type": "code", "execution_count": None, "outputs": []}
    run = c.notebook_run(_executed(tmp_path, [md, ok, failed, never]))
    assert (run.notebook, run.cells_run, run.stopped_at) == ("07_demo", 2, 2)
    assert run.holds("'exists': False") and not run.holds("tensorrt_llm is not importable")
    early = c.notebook_run(_executed(tmp_path, [md, dict(failed, outputs=[{"output_type": "error", "ename": "TypeError",
                                                                        "evalue": "unexpected keyword argument 'dtype'"}]), never]))
    assert early.stopped_at == 1 and not early.holds("'exists': False")  # failed before the machine was needed
    whole = c.notebook_run(_executed(tmp_path, [ok, ok]))
    assert whole.stopped_at is None and whole.cells_run == 2 and not whole.holds("anything") and whole.holds("")
    assert not run.holds("")  # a notebook that must run to its end and stopped
    assert run.holds("'exists': False | fine") and not run.holds("'exists': False | fine | absent")


def test_staged_gpu_outputs_are_what_the_fill_reads(build_root):
    from scripts.engine.config import read_engine_config
    from scripts.profiles import load_profile

    config_path, build_path = c.stage_gpu_outputs("gpu-trtllm")
    config = read_engine_config(config_path.parent)
    assert config["engine"] == "tensorrt_llm" and config_path.parent == load_profile("gpu-trtllm").path("engine_dir")
    import json
    build = json.loads(build_path.read_text())["build_config"]
    assert build == {k: config[k] for k in ("max_batch_size", "max_input_len", "max_seq_len")}
    (only,) = c.stage_gpu_outputs("cpu")  # a vLLM engine has no build step: its engine config alone
    assert only.name == "engine_config.json"
