"""make run's executor: a notebook runs top to bottom in a kernel reached over IPC, not TCP."""
import json

import nbformat
import pytest

from scripts.lab import run_notebooks
from scripts.profiles import load_profile


def test_a_notebook_runs_in_a_kernel_over_ipc_with_its_parameters(tmp_path, capfd):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("PROFILE = 'cpu'\nN = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import json\nfrom ipykernel import get_connection_info\n"
                                          "print(json.loads(get_connection_info())['transport'], N)")]
    source, executed = tmp_path / "00_check.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    record = {"commit": "c" * 40, "commit_from": "git", "dirty": False, "profile": "cpu", "gpu": None}
    assert run_notebooks.execute(source, executed, "cpu", progress=False, parameters={"N": 7}, record=record) > 0
    copy = nbformat.read(executed, as_version=4)
    outputs = copy.cells[-1].outputs
    assert outputs[0]["text"] == "ipc 7\n", outputs
    assert "without encryption" not in capfd.readouterr().err
    assert copy.metadata["tutorial"] == record and copy.metadata["papermill"]["parameters"] == {"N": 7}
    # papermill's own formatting (what the committed notebooks have): a no-op rewrite changes no byte
    assert nbformat.writes(copy) == executed.read_text(encoding="utf-8")


def test_a_copy_that_failed_records_where_it_came_from_too(tmp_path):
    papermill = pytest.importorskip("papermill")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("PROFILE = 'cpu'", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("raise RuntimeError('stop here')")]
    source, executed = tmp_path / "00_check.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    record = {"commit": None, "commit_from": None, "dirty": None, "profile": "cpu", "gpu": None}
    with pytest.raises(papermill.PapermillExecutionError, match="stop here"):
        run_notebooks.execute(source, executed, "cpu", progress=False, record=record)
    assert nbformat.read(executed, as_version=4).metadata["tutorial"] == record


def test_a_run_takes_its_record_once_and_gives_it_to_every_copy(tmp_path, monkeypatch, capsys):
    record = {"commit": "d" * 40, "commit_from": "TUTORIAL_COMMIT", "dirty": False, "profile": "cpu",
              "gpu": ["NVIDIA H200, 143771 MiB"]}
    taken, given = [], []
    monkeypatch.setattr(run_notebooks, "provenance", lambda profile: taken.append(profile) or record)
    monkeypatch.setattr(run_notebooks, "execute", lambda *a, **k: given.append(k["record"]) or 1.0)
    assert run_notebooks.main(["--only", "00", "02", "--out", str(tmp_path)]) == 0
    assert taken == ["cpu"] and given == [record, record]
    assert capsys.readouterr().out.splitlines()[0] == f"commit {'d' * 40} (TUTORIAL_COMMIT), GPU NVIDIA H200, 143771 MiB"


def test_dash_p_reaches_only_the_notebooks_that_have_the_parameter(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("PROFILE = 'cpu'\nCONCURRENCY = [1, 8]\nINPUT_LEN = 32")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    path = tmp_path / "07_x.ipynb"
    nbformat.write(nb, path)
    pairs = [["CONCURRENCY", "[1, 32, 256]"], ["INPUT_LEN", "128"], ["SMOKE", "true"]]
    assert run_notebooks.notebook_parameters(path, pairs) == {"CONCURRENCY": [1, 32, 256], "INPUT_LEN": 128}
    # PREFIX:NAME: only the notebooks whose name starts with PREFIX; a later pair wins
    scoped = [["07:INPUT_LEN", "1024"], ["02:CONCURRENCY", "[4]"], ["INPUT_LEN", "64"], ["07_x:INPUT_LEN", "512"]]
    assert run_notebooks.notebook_parameters(path, scoped) == {"INPUT_LEN": 512}


def test_smoke_is_injected_unless_full_and_an_explicit_smoke_wins(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    cell = nbformat.v4.new_code_cell("PROFILE = 'cpu'\nSMOKE = False\nREPEATS = 2")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    bench, other = tmp_path / "07_bench.ipynb", tmp_path / "05_serve.ipynb"
    nbformat.write(nb, bench)
    nbformat.write(nb, other)
    pairs = [["07:SMOKE", "false"], ["07:REPEATS", "1"]]
    assert run_notebooks.run_parameters(bench, pairs) == {"SMOKE": False, "REPEATS": 1}
    assert run_notebooks.run_parameters(other, pairs) == {"SMOKE": True}
    assert run_notebooks.run_parameters(other, pairs, full=True) == {}
    nb.cells = [nbformat.v4.new_code_cell("PROFILE = 'cpu'")]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nbformat.write(nb, other)
    assert run_notebooks.run_parameters(other, [["SMOKE", "false"]]) == {}


def test_gpu_trtllm_plan_leaves_out_what_its_profile_skips_and_says_why():
    reasons = load_profile("gpu-trtllm").skipped_notebooks()
    paths, skipped = run_notebooks.plan("gpu-trtllm")
    assert reasons and {p.stem: r for p, r in skipped.items()} == reasons
    assert [p.stem for p in paths] == [p.stem for p in run_notebooks.notebook_paths() if p.stem not in reasons]


def test_cpu_runs_every_notebook():
    assert run_notebooks.plan("cpu") == (run_notebooks.notebook_paths(), {})


def test_a_skipped_notebook_is_reported_with_its_reason_and_not_executed(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(run_notebooks, "execute", lambda *a, **k: pytest.fail("a skipped notebook was executed"))
    assert run_notebooks.main(["--profile", "gpu-trtllm", "--only", "07", "--out", str(tmp_path)]) == 0
    reason = load_profile("gpu-trtllm").skipped_notebooks()["07_benchmark_and_monitor"]
    assert capsys.readouterr().out.split() == ["07_benchmark_and_monitor", "skipped", "on", "gpu-trtllm:", *reason.split()]


def test_skipping_a_notebook_that_does_not_exist_is_an_error(tmp_path):
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "00_check_environment.ipynb")
    with pytest.raises(SystemExit, match="names no notebook.*07_benchmark_and_monitor"):
        run_notebooks.plan("gpu-trtllm", directory=tmp_path)
