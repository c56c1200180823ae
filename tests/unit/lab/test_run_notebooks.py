"""make run's executor: a notebook runs top to bottom in a kernel reached over IPC, not TCP."""
import json

import nbformat

from scripts.lab import run_notebooks


def test_a_notebook_runs_in_a_kernel_over_ipc_with_its_parameters(tmp_path, capfd):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("PROFILE = 'cpu'\nN = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import json\nfrom ipykernel import get_connection_info\n"
                                          "print(json.loads(get_connection_info())['transport'], N)")]
    source, executed = tmp_path / "00_check.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    assert run_notebooks.execute(source, executed, "cpu", progress=False, parameters={"N": 7}) > 0
    outputs = nbformat.read(executed, as_version=4).cells[-1].outputs
    assert outputs[0]["text"] == "ipc 7\n", outputs
    assert "without encryption" not in capfd.readouterr().err


def test_dash_p_reaches_only_the_notebooks_that_have_the_parameter(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("PROFILE = 'cpu'\nCONCURRENCY = [1, 8]\nINPUT_LEN = 32")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    path = tmp_path / "07_x.ipynb"
    nbformat.write(nb, path)
    pairs = [["CONCURRENCY", "[1, 32, 256]"], ["INPUT_LEN", "128"], ["SMOKE", "true"]]
    assert run_notebooks.notebook_parameters(path, pairs) == {"CONCURRENCY": [1, 32, 256], "INPUT_LEN": 128}
