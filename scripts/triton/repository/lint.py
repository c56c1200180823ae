"""Lint a Triton model repository before a server is pointed at it.

Every ``config.pbtxt`` is parsed with Triton's own ``ModelConfig`` protobuf (shipped in
tritonclient), then checked for the mistakes that make a server refuse a model or an
ensemble at load time. Usage::

    python -m scripts.triton.repository.lint REPO_DIR    # exit 0: clean, 1: problems, 2: bad call

Each problem prints as ``path:line: rule: message (fix: ...)``; line 0 means unknown.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from scripts.capacity.instance_memory import VLLM_TOGETHER
from scripts.triton.repository.fill_template import CONFIG, JUNK

try:
    from tritonclient.grpc import model_config_pb2
except (ImportError, RuntimeError) as exc:  # tritonclient without its grpc extra raises RuntimeError
    raise ImportError(
        "scripts.triton.repository.lint needs Triton's ModelConfig protobuf: "
        "pip install 'tritonclient[grpc]' (bash env/setup_env.sh installs it)"
    ) from exc

_VERSION = re.compile(r"[1-9][0-9]*")


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int  # 1-based; 0 when unknown
    rule: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.message} (fix: {self.fix})"


class LintResult(list):
    """The problems found (a ``list[Problem]``) and, in ``models``, the model folders linted."""

    def __init__(self, problems: list[Problem], models: list[str]):
        super().__init__(problems)
        self.models = models


@dataclass
class _Model:
    name: str
    folder: Path
    text: str
    config: model_config_pb2.ModelConfig | None  # None when the config does not parse
    versions: list[Path] = field(default_factory=list)

    @property
    def config_path(self) -> Path:
        return self.folder / CONFIG

    def line(self, pattern: str, start: int = 0, nth: int = 0) -> tuple[int, int]:
        """(1-based line, offset) of the ``nth`` match of ``pattern`` from ``start``; (0, start) if none."""
        for index, match in enumerate(re.compile(pattern, re.MULTILINE).finditer(self.text, start)):
            if index == nth:
                return self.text.count("\n", 0, match.start()) + 1, match.start()
        return 0, start

    def problem(self, line: int, rule: str, message: str, fix: str) -> Problem:
        return Problem(self.config_path, line, rule, message, fix)


def _quoted(field_name: str, value: str) -> str:
    return rf'\b{field_name}\s*:\s*"{re.escape(value)}"'


def lint(repo_dir: str | Path) -> LintResult:
    """Lint the model repository ``repo_dir``; raises NotADirectoryError if it is not one."""
    repo = Path(repo_dir)
    if not repo.is_dir():
        raise NotADirectoryError(f"{repo} is not a directory: give the model repository's path")
    problems: list[Problem] = []
    models: dict[str, _Model] = {}
    for entry in sorted(p for p in repo.iterdir() if p.is_dir()):
        if entry.name in JUNK or entry.name.startswith("."):
            problems.append(_stray(entry, "is not a model", "delete it"))
        elif not (entry / CONFIG).is_file():
            problems.append(_stray(entry, f"has no {CONFIG}, so it is not a model",
                                   f"delete it, or add its {CONFIG} if it is a model"))
        else:
            models[entry.name] = _load(entry, problems)
    for model in models.values():
        problems += _check_model(model)
        if model.config is not None and model.config.platform == "ensemble":
            problems += _check_ensemble(model, models)
    problems.sort(key=lambda p: (str(p.path), p.line, p.rule))
    return LintResult(problems, list(models))


def _stray(folder: Path, why: str, fix: str) -> Problem:
    return Problem(folder, 0, "stray-folder", f"folder {folder.name!r} {why}", fix)


def _load(folder: Path, problems: list[Problem]) -> _Model:
    """Read and parse one model's config and sort its sub-folders into versions and strays."""
    text = (folder / CONFIG).read_text(errors="replace")
    model = _Model(folder.name, folder, text, model_config_pb2.ModelConfig())
    try:
        text_format.Parse(text, model.config)
    except text_format.ParseError as exc:
        model.config = None
        message = re.sub(r"^\d+:\d+ : ", "", str(exc))
        hint = "; fill any ${...} left in it with scripts.triton.repository.fill_template" if "${" in text else ""
        problems.append(model.problem(exc.GetLine() or 0, "parse", message,
                                      f"correct the config at that line{hint}"))
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if _VERSION.fullmatch(sub.name):
            model.versions.append(sub)
        elif sub.name in JUNK or sub.name.startswith("."):
            problems.append(_stray(sub, f"in model {folder.name!r} is not a version", "delete it"))
        elif sub.name.isdigit():
            problems.append(_stray(sub, "is not a version: Triton ignores 0 and leading zeros",
                                   "rename it to a positive number without leading zeros, like 1"))
        else:
            problems.append(_stray(sub, f"in model {folder.name!r} is not a numeric version",
                                   "delete it, or move it out of the model folder"))
    return model


def _check_model(model: _Model) -> list[Problem]:
    """The rules that need only this model: versions, name, python files, batching, decoupling."""
    found = []
    if not model.versions:
        found.append(Problem(model.folder, 0, "no-version", f"model {model.name!r} has no version folder",
                             f"create {model.name}/1/ holding the model's files"))
    config = model.config
    if config is None:
        return found
    if config.name and config.name != model.name:
        line, _ = model.line(_quoted("name", config.name))
        found.append(model.problem(line, "name-mismatch",
                                   f"config name {config.name!r} differs from folder {model.name!r}",
                                   f'set name: "{model.name}" or rename the folder'))
    if config.backend == "python":
        filename = config.default_model_filename or "model.py"
        line, _ = model.line(_quoted("backend", "python"))
        for version in model.versions:
            if not (version / filename).is_file():
                found.append(model.problem(
                    line, "python-model-missing",
                    f'backend "python" needs {version.name}/{filename}, which does not exist',
                    f"add {model.name}/{version.name}/{filename}, or set default_model_filename "
                    "to the file holding TritonPythonModel"))
    if config.backend == "vllm" and any(tensor.name == "text_input" for tensor in config.input):
        found += _check_vllm_text_model(model)
    if config.backend == "vllm":
        found += _check_vllm_gpu_instances(model)
    if config.HasField("dynamic_batching") and config.max_batch_size == 0:
        line, _ = model.line(r"\bdynamic_batching\b")
        found.append(model.problem(line, "batch-size", "dynamic_batching is set but max_batch_size is 0",
                                   "set max_batch_size > 0, or remove dynamic_batching"))
    if "decoupled_mode" in config.parameters:
        found += _check_decoupled_mode(model)
    return found


def _check_vllm_text_model(model: _Model) -> list[Problem]:
    """A text-in model of the ``vllm`` backend (like Triton's official vLLM backend): vLLM batches by
    itself, so ``max_batch_size`` is 0 (the backend's auto-complete refuses more), and every version
    folder holds the ``model.json`` with its engine arguments (the backend reads nothing else)."""
    found = []
    if model.config.max_batch_size != 0:
        line, _ = model.line(r"^\s*max_batch_size\s*:")
        found.append(model.problem(line, "batch-size",
                                   f"max_batch_size is {model.config.max_batch_size}, but the vllm backend batches "
                                   "requests itself and loads a text-in model only with 0",
                                   "set max_batch_size: 0 (vLLM's max_num_seqs in model.json bounds the batch)"))
    line, _ = model.line(_quoted("backend", "vllm"))
    for version in model.versions:
        if not (version / "model.json").is_file():
            found.append(model.problem(line, "model-json-missing",
                                       f"version {version.name} has no model.json, the engine arguments the "
                                       "vllm backend reads",
                                       f"write {model.name}/{version.name}/model.json (copy it in whole before "
                                       "the version folder appears to a polling server)"))
    return found


def _check_vllm_gpu_instances(model: _Model) -> list[Problem]:
    """More than one vLLM instance of a model on one GPU: they start together, and each vLLM engine counts
    the memory the others take while it profiles as its own, so one gets its ``gpu_memory_utilization``
    and the others a KV cache of what is left, or none (notebook 06, section 9)."""
    found = []
    for group in model.config.instance_group:
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU and group.count > 1:
            line, _ = model.line(r"\bKIND_GPU\b")
            found.append(model.problem(
                line, "vllm-instances",
                f"instance_group count {group.count} of KIND_GPU puts {group.count} vLLM engines on each GPU: "
                f"{VLLM_TOGETHER} (notebook 06, section 9)",
                "set count: 1 (one vLLM engine batches max_num_seqs sequences); for more, add GPUs or Serve replicas"))
    return found


def _check_decoupled_mode(model: _Model) -> list[Problem]:
    value = model.config.parameters["decoupled_mode"].string_value
    policy = model.config.model_transaction_policy.decoupled
    line, _ = model.line(_quoted("key", "decoupled_mode"))
    if value.lower() not in ("true", "false"):
        return [model.problem(line, "decoupled", f'parameter decoupled_mode is {value!r}, not "true" or "false"',
                              f'set it to "{str(policy).lower()}" like model_transaction_policy.decoupled')]
    if (value.lower() == "true") != policy:
        return [model.problem(
            line, "decoupled",
            f"parameter decoupled_mode is {value!r} but model_transaction_policy.decoupled is "
            f"{str(policy).lower()}",
            "give both the same value: fill decoupled_mode and the policy from one setting")]
    return []


def _check_ensemble(model: _Model, models: dict[str, _Model]) -> list[Problem]:
    """Composing models exist, tensors flow from inputs to outputs, batch sizes fit."""
    config = model.config
    found = []
    steps = list(config.ensemble_scheduling.step)
    produced = [set(step.output_map.values()) for step in steps]
    inputs = {tensor.name for tensor in config.input}
    seen: dict[str, int] = {}
    for index, step in enumerate(steps):
        # Locate this step in the text: the n-th mention of its model_name.
        nth = seen[step.model_name] = seen.get(step.model_name, -1) + 1
        line, start = model.line(_quoted("model_name", step.model_name), nth=nth)

        available = inputs.union(*(p for i, p in enumerate(produced) if i != index))
        for value in step.input_map.values():
            if value not in available:
                at, _ = model.line(_quoted("value", value), start)
                found.append(model.problem(
                    at, "ensemble-tensor",
                    f"step {step.model_name!r} reads {value!r}, which is neither an ensemble input "
                    "nor produced by another step",
                    "map it from an ensemble input or from another step's output_map value"))

        target = models.get(step.model_name)
        if target is None:
            found.append(model.problem(
                line, "ensemble-missing-model",
                f"step model {step.model_name!r} is not in the repository",
                f"add the model folder {step.model_name}/ or use one of: {', '.join(sorted(models))}"))
            continue
        if target.config is None:
            continue
        found += _check_step_tensors(model, step, target.config, start)
        if config.max_batch_size > target.config.max_batch_size:
            at, _ = model.line(r"^\s*max_batch_size\s*:")
            found.append(model.problem(
                at, "batch-size",
                f"ensemble max_batch_size {config.max_batch_size} exceeds {step.model_name!r}'s "
                f"max_batch_size {target.config.max_batch_size}",
                f"lower the ensemble's max_batch_size to at most {target.config.max_batch_size}, "
                f"or raise {step.model_name!r}'s"))

    all_produced = set().union(*produced)
    output_start = model.line(r"\boutput\s*:?\s*[\[{]")[1]
    for tensor in config.output:
        if tensor.name not in all_produced:
            at, _ = model.line(_quoted("name", tensor.name), output_start)
            found.append(model.problem(
                at, "ensemble-tensor", f"ensemble output {tensor.name!r} is produced by no step",
                "add it as an output_map value of the step that computes it, or remove the output"))
    return found


def _check_step_tensors(
    model: _Model, step: model_config_pb2.ModelEnsembling.Step, target: model_config_pb2.ModelConfig, start: int
) -> list[Problem]:
    """input_map keys must be inputs, output_map keys outputs, of the composing model."""
    found = []
    for kind, mapping, tensors in (("input", step.input_map, target.input),
                                   ("output", step.output_map, target.output)):
        names = [tensor.name for tensor in tensors]
        for key in mapping:
            if key not in names:
                at, _ = model.line(_quoted("key", key), start)
                found.append(model.problem(
                    at, "ensemble-tensor",
                    f"{kind}_map key {key!r} is not an {kind} of model {step.model_name!r}",
                    f"use one of its {kind}s: {', '.join(names) or 'none'}"))
    return found


def format_report(problems: LintResult) -> str:
    """One line per problem, then a summary such as ``3 problems in 2 models``."""
    count = len(problems.models)
    models = f"{count} model{'s' if count != 1 else ''}"
    if not problems:
        return f"no problems in {models}"
    noun = "problem" if len(problems) == 1 else "problems"
    return "\n".join([*map(str, problems), f"{len(problems)} {noun} in {models}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.triton.repository.lint",
                                     description="Lint a Triton model repository.")
    parser.add_argument("repo_dir", metavar="REPO_DIR", help="the model repository to check")
    args = parser.parse_args(argv)
    try:
        problems = lint(args.repo_dir)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
