import subprocess
import sys
from pathlib import Path

import pytest

from scripts.triton.repository.lint import Problem, format_report, lint, main

PREPROCESSING = """\
name: "preprocessing"
backend: "python"
max_batch_size: 8
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [
  { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "input_lengths" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "request_output_len" data_type: TYPE_INT32 dims: [ 1 ] }
]
parameters { key: "tokenizer_dir" value { string_value: "/build/tiny-llama" } }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

LLM = """\
name: "llm"
backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: false }
dynamic_batching { max_queue_delay_microseconds: 100 }
input [
  { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true },
  { name: "input_lengths" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "request_output_len" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [
  { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] },
  { name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] }
]
parameters { key: "decoupled_mode" value { string_value: "false" } }
parameters { key: "engine_dir" value { string_value: "/build/engine" } }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

POSTPROCESSING = """\
name: "postprocessing"
backend: "python"
max_batch_size: 8
input [
  { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] },
  { name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }
]
parameters { key: "tokenizer_dir" value { string_value: "/build/tiny-llama" } }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ENSEMBLE = """\
name: "ensemble"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "preprocessing"
      model_version: -1
      input_map { key: "text_input" value: "text_input" }
      input_map { key: "max_tokens" value: "max_tokens" }
      output_map { key: "input_ids" value: "_input_ids" }
      output_map { key: "input_lengths" value: "_input_lengths" }
      output_map { key: "request_output_len" value: "_request_output_len" }
    },
    {
      model_name: "llm"
      model_version: -1
      input_map { key: "input_ids" value: "_input_ids" }
      input_map { key: "input_lengths" value: "_input_lengths" }
      input_map { key: "request_output_len" value: "_request_output_len" }
      output_map { key: "output_ids" value: "_output_ids" }
      output_map { key: "sequence_length" value: "_sequence_length" }
    },
    {
      model_name: "postprocessing"
      model_version: -1
      input_map { key: "output_ids" value: "_output_ids" }
      input_map { key: "sequence_length" value: "_sequence_length" }
      output_map { key: "text_output" value: "text_output" }
    }
  ]
}
"""

MODEL_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
"""

CONFIGS = {"preprocessing": PREPROCESSING, "llm": LLM, "postprocessing": POSTPROCESSING, "ensemble": ENSEMBLE}


@pytest.fixture
def repo(tmp_path):
    """A valid four-model repository: tokenizer, engine and detokenizer behind an ensemble."""
    root = tmp_path / "model_repository"
    for name, config in CONFIGS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        if name != "ensemble":
            (root / name / "1" / "model.py").write_text(MODEL_PY)
    (root / "preprocessing" / "1" / "__pycache__").mkdir()  # interpreter cache inside a version: fine
    (root / "preprocessing" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (root / "README.md").write_text("files in the root are ignored\n")
    return root


def edit(repo, model, old, new):
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def line_of(path, needle):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def only(problems, rule):
    assert [p.rule for p in problems] == [rule], format_report(problems)
    return problems[0]


def test_valid_repository_is_clean(repo):
    problems = lint(repo)
    assert problems == []
    assert problems.models == ["ensemble", "llm", "postprocessing", "preprocessing"]
    assert format_report(problems) == "no problems in 4 models"


def test_parse_error_has_file_and_line(repo):
    path = edit(repo, "llm", "max_batch_size: 8", "max_batch_size: ${triton_max_batch_size}")
    problem = only(lint(repo), "parse")
    assert problem.path == path
    assert problem.line == line_of(path, "max_batch_size")
    assert "fill_template" in problem.fix


def test_unknown_field_is_a_parse_error(repo):
    path = edit(repo, "postprocessing", "max_batch_size: 8", "max_batch_size: 8\nmax_batch: 8")
    problem = only(lint(repo), "parse")
    assert (problem.path, problem.line) == (path, 4)
    assert "max_batch" in problem.message


def test_name_mismatch(repo):
    path = edit(repo, "preprocessing", 'name: "preprocessing"', 'name: "preprocess"')
    problem = only(lint(repo), "name-mismatch")
    assert (problem.path, problem.line) == (path, 1)
    assert 'name: "preprocessing"' in problem.fix


def test_no_version(repo):
    (repo / "ensemble" / "1").rmdir()
    problem = only(lint(repo), "no-version")
    assert problem.path == repo / "ensemble"
    assert "ensemble/1/" in problem.fix


def test_non_numeric_folder_is_not_a_version(repo):
    (repo / "ensemble" / "1").rename(repo / "ensemble" / "latest")
    problems = lint(repo)
    assert sorted(p.rule for p in problems) == ["no-version", "stray-folder"]
    assert {p.path for p in problems} == {repo / "ensemble", repo / "ensemble" / "latest"}


@pytest.mark.parametrize(
    "folder",
    [".ipynb_checkpoints", "__pycache__", "notes", "llm/.ipynb_checkpoints", "llm/__pycache__", "llm/01"],
)
def test_stray_folder(repo, folder):
    (repo / folder).mkdir()
    (repo / folder / "config-checkpoint.pbtxt").write_text(LLM)
    problem = only(lint(repo), "stray-folder")
    assert problem.path == repo / folder
    assert problem.fix.startswith(("delete it", "rename it"))


def test_python_model_missing(repo):
    (repo / "postprocessing" / "1" / "model.py").unlink()
    problem = only(lint(repo), "python-model-missing")
    path = repo / "postprocessing" / "config.pbtxt"
    assert (problem.path, problem.line) == (path, line_of(path, 'backend: "python"'))
    assert "postprocessing/1/model.py" in problem.fix


def test_python_model_with_default_model_filename(repo):
    (repo / "postprocessing" / "1" / "model.py").rename(repo / "postprocessing" / "1" / "detokenize.py")
    edit(repo, "postprocessing", 'backend: "python"', 'backend: "python"\ndefault_model_filename: "detokenize.py"')
    assert lint(repo) == []


def test_ensemble_missing_model(repo):
    path = edit(repo, "ensemble", 'model_name: "postprocessing"', 'model_name: "detokenizer"')
    problem = only(lint(repo), "ensemble-missing-model")
    assert (problem.path, problem.line) == (path, line_of(path, 'model_name: "detokenizer"'))
    assert "detokenizer" in problem.message


@pytest.mark.parametrize(
    ("old", "new", "needle", "said"),
    [
        ('value: "max_tokens"', 'value: "max_token"', 'value: "max_token"', "neither an ensemble input"),
        ('key: "max_tokens"', 'key: "max_new_tokens"', 'key: "max_new_tokens"', "not an input of model"),
        ('key: "sequence_length" value: "_sequence_length" }\n    }',
         'key: "seq_len" value: "_sequence_length" }\n    }', 'key: "seq_len"', "not an output of model"),
        ('output_map { key: "text_output" value: "text_output" }',
         'output_map { key: "text_output" value: "text" }', 'name: "text_output"', "produced by no step"),
    ],
)
def test_ensemble_tensor(repo, old, new, needle, said):
    path = edit(repo, "ensemble", old, new)
    problem = only(lint(repo), "ensemble-tensor")
    assert (problem.path, problem.line) == (path, line_of(path, needle))
    assert said in problem.message


def test_ensemble_batch_size_exceeds_composing_model(repo):
    edit(repo, "llm", "max_batch_size: 8", "max_batch_size: 4")
    problem = only(lint(repo), "batch-size")
    path = repo / "ensemble" / "config.pbtxt"
    assert (problem.path, problem.line) == (path, 3)
    assert "'llm'" in problem.message and "at most 4" in problem.fix


def test_dynamic_batching_without_batching(repo):
    (repo / "standalone" / "1").mkdir(parents=True)
    (repo / "standalone" / "1" / "model.py").write_text(MODEL_PY)
    path = repo / "standalone" / "config.pbtxt"
    path.write_text(LLM.replace('name: "llm"', 'name: "standalone"').replace("max_batch_size: 8", "max_batch_size: 0"))
    problem = only(lint(repo), "batch-size")
    assert (problem.path, problem.line) == (path, line_of(path, "dynamic_batching"))


@pytest.mark.parametrize("value", ["true", "yes"])
def test_decoupled_mode_disagrees_with_policy(repo, value):
    path = edit(repo, "llm", 'string_value: "false"', f'string_value: "{value}"')
    problem = only(lint(repo), "decoupled")
    assert (problem.path, problem.line) == (path, line_of(path, 'key: "decoupled_mode"'))


def test_decoupled_mode_agreeing_with_policy_is_clean(repo):
    edit(repo, "llm", 'string_value: "false"', 'string_value: "True"')
    edit(repo, "llm", "decoupled: false", "decoupled: true")
    assert lint(repo) == []


def test_problem_str_and_report(repo):
    edit(repo, "preprocessing", 'name: "preprocessing"', 'name: "preprocess"')
    (repo / ".ipynb_checkpoints").mkdir()
    problems = lint(repo)
    report = format_report(problems).splitlines()
    assert report[-1] == "2 problems in 4 models"
    assert report[0] == f"{repo / '.ipynb_checkpoints'}:0: stray-folder: folder '.ipynb_checkpoints' is not a model (fix: delete it)"
    assert str(Problem(Path("m/config.pbtxt"), 3, "rule", "msg", "do it")) == "m/config.pbtxt:3: rule: msg (fix: do it)"


def test_cli_exit_codes(repo, capsys, tmp_path):
    assert main([str(repo)]) == 0
    assert capsys.readouterr().out == "no problems in 4 models\n"
    (repo / "llm" / "__pycache__").mkdir()
    assert main([str(repo)]) == 1
    out = capsys.readouterr().out
    assert f"{repo / 'llm' / '__pycache__'}:0: stray-folder:" in out and out.endswith("1 problem in 4 models\n")
    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_module_entry_point(repo):
    (repo / "llm" / "1" / "model.py").unlink()
    proc = subprocess.run([sys.executable, "-m", "scripts.triton.repository.lint", str(repo)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "python-model-missing" in proc.stdout
