"""The model-load failures readers meet the week after launch, reproduced on copies of a good model.

Why it is built this way, and the sources: docs/design/lifecycle.md.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from scripts.lifecycle.versions import renamed_config
from scripts.triton.repository.lint import lint

CASES = ("syntax", "missing-file", "batch-size")
#: What Triton says of each case, in the load's answer or its log (the syntax error only in the log):
#: a failure for another reason (a crash, a timeout) is not the lesson's.
CAUSES = {
    "syntax": "failed to read text proto",
    "missing-file": "model.json is missing",
    "batch-size": "specified max_batch_size 0",
}
FIXES = {
    "syntax": "close the bracket at the line the linter names (Triton's message names only the column)",
    "missing-file": "copy the version's model.json (its engine arguments) into the folder before loading",
    "batch-size": "set max_batch_size: 0; the batch is bounded by vLLM's max_num_seqs in model.json",
    "permissions": "make the repository readable by the server's user (chmod -R a+rX, or chown it to that user)",
    "half-copied": "copy the version elsewhere on the same filesystem and rename it into place (an atomic step), "
                   "or use --model-control-mode=explicit and load only when the copy is complete",
}


def broken_name(model: str, case: str) -> str:
    return f"{model}_{case.replace('-', '_')}"


def copy_model(source: Path, repo: Path, name: str) -> Path:
    """Copy the model folder ``source`` to ``repo/name``, its config renamed to match."""
    folder = repo / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, folder)
    config = folder / "config.pbtxt"
    config.write_text(renamed_config(config.read_text(), name))
    return folder


def break_model(source: Path, repo: Path, case: str) -> str:
    """A copy of ``source`` in ``repo`` with the ``case`` broken; returns the copy's model name."""
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}: use one of {', '.join(CASES)}")
    folder = copy_model(source, repo, broken_name(source.name, case))
    config = folder / "config.pbtxt"
    text = config.read_text()
    if case == "syntax":
        text = text.replace("instance_group [", "instance_group [ [", 1)
    elif case == "batch-size":
        text = re.sub(r"^max_batch_size:\s*\d+", "max_batch_size: 8", text, count=1, flags=re.MULTILINE)
    else:  # missing-file: the highest version has its folder but not its engine arguments
        versions = sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        (versions[-1] / "model.json").unlink()
    config.write_text(text)
    return folder.name


def explained(case: str, error: str, log_lines: list[str]) -> bool:
    """True when the load's ``error`` or the server's ``log_lines`` for it name the case's cause."""
    return CAUSES[case] in "\n".join([error, *log_lines])


def lint_messages(repo: Path, model: str) -> list[str]:
    """The linter's findings for one model of ``repo`` (rule: message, fix)."""
    return [f"line {p.line}: {p.rule}: {p.message} (fix: {p.fix})" for p in lint(repo)
            if p.path.is_relative_to(repo / model)]


def private_copy(model_dir: Path, repo: Path, name: str) -> Path:
    """A copy of the model in ``repo/name`` with copies of the checkpoints it names (in
    ``repo/checkpoints``, its ``model.json`` files pointing there), as a deployment copies them:
    the model folder owner-only (:func:`make_private`), each checkpoint's weights with the mode
    ``save_pretrained`` gives ``model.safetensors`` here (0600; the tokenizer files beside it get
    0644). Earlier runs or a reader's ``chmod`` of the originals change nothing."""
    folder = copy_model(model_dir, repo, name)
    for model_json in sorted(folder.glob("*/model.json")):
        arguments = json.loads(model_json.read_text())
        source = Path(arguments["model"])
        target = repo / "checkpoints" / f"v{model_json.parent.name}-{source.name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        for weights in target.glob("*.safetensors"):
            weights.chmod(stat.S_IRUSR | stat.S_IWUSR)
        arguments.update({k: str(target) for k in ("model", "tokenizer") if arguments.get(k) == str(source)})
        model_json.write_text(json.dumps(arguments, indent=2) + "\n")
    make_private(folder)
    return folder


def make_private(folder: Path) -> None:
    """Owner-only modes (0700 folders, 0600 files), as a copy made with a umask of 077 leaves them."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(stat.S_IRWXU if path.is_dir() else stat.S_IRUSR | stat.S_IWUSR)


def make_readable(folder: Path) -> None:
    """The fix of :func:`make_private`: everyone may read the files and enter the folders (a+rX)."""
    for path in [folder, *folder.rglob("*")]:
        extra = stat.S_IRGRP | stat.S_IROTH | (stat.S_IXGRP | stat.S_IXOTH if path.is_dir() else 0)
        path.chmod(path.stat().st_mode | extra)


def served_paths(model_folder: Path) -> list[Path]:
    """Everything a server reads for one model: its folder, and the checkpoints its versions' ``model.json`` name."""
    paths = [model_folder]
    for model_json in sorted(model_folder.glob("*/model.json")):
        arguments = json.loads(model_json.read_text())
        paths += sorted({Path(arguments[key]) for key in ("model", "tokenizer") if arguments.get(key)})
    return paths


def unreadable_for(user: str, paths: list[Path]) -> list[Path]:
    """The files and folders under ``paths`` that ``user`` cannot read (or enter), by their mode bits:
    the check a root shell cannot make by trying, since root reads everything."""
    import pwd  # noqa: PLC0415

    entry = pwd.getpwnam(user)
    found = []
    for top in paths:
        for path in [top, *sorted(top.rglob("*"))] if top.is_dir() else [top]:
            st = path.stat()
            mode = st.st_mode
            bits = (stat.S_IRUSR | stat.S_IXUSR, stat.S_IRGRP | stat.S_IXGRP, stat.S_IROTH | stat.S_IXOTH)
            who = 0 if st.st_uid == entry.pw_uid else 1 if st.st_gid == entry.pw_gid else 2
            need = bits[who] if path.is_dir() else bits[who] & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            if mode & need != need:
                found.append(path)
    return found


#: What varies from run to run at the start of a log line: Triton's glog prefix (severity, date, time,
#: thread id: ``E1204 16:28:25.841686 26217 ``), terminal colours and the PID in vLLM's ``(Worker pid=N)``.
_RUN_PREFIX = re.compile(r"^[IWE]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ |\x1b\[[0-9;]*m")
_PID = re.compile(r"\((\w+) pid=\d+\)")


def error_lines(log: str, pattern: str = r"(?i)error|failed|denied") -> list[str]:
    """The lines of a Triton log (or start error) that say what failed, without Triton's tables and
    without what differs between runs at their start (so a line cut to a width reads the same)."""
    return [_PID.sub(r"(\1)", _RUN_PREFIX.sub("", line)).strip() for line in log.splitlines()
            if re.search(pattern, line) and not line.startswith("|")]


@dataclass
class HalfCopy:
    """A version folder copied into a polled repository in two steps, as ``cp -r`` or a slow sync
    does: the folder first, its ``model.json`` ``delay_s`` later."""

    source: Path  # a complete version folder
    target: Path  # where it appears, e.g. repo/lm/2
    delay_s: float
    steps: list[tuple[float, str]] = field(default_factory=list)

    def run(self) -> None:
        start = time.monotonic()
        self.target.mkdir()
        self.steps.append((0.0, f"created {self.target.name}/ (empty)"))
        time.sleep(self.delay_s)
        for item in sorted(self.source.iterdir()):
            shutil.copy2(item, self.target / item.name)
        os.utime(self.target)
        self.steps.append((time.monotonic() - start, f"copied {', '.join(sorted(p.name for p in self.source.iterdir()))}"))


def atomic_copy(source: Path, target: Path) -> None:
    """Copy next to ``target`` under a hidden name, then rename: a polling server sees all or nothing.
    (Triton skips folders whose names are not numbers, so the hidden copy is never loaded.)"""
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    staging.rename(target)


def first_line(message: str) -> str:
    """A Triton error without the Python traceback the backend appends (``\\n\\nAt:\\n  file(line): ...``)."""
    return message.split("\n\nAt:", 1)[0].strip().splitlines()[0] if message.strip() else ""


def watch_versions(triton, name: str, prompt: str, until_ready: str, timeout_s: float, poll_s: float = 0.5,
                   max_tokens: int = 4) -> list[dict]:
    """Poll a model's version states and ask it ``prompt`` (no version) until version ``until_ready``
    is READY; returns each change seen: ``{"t", "states", "answered"}`` (the version that answered,
    None on an error). Raises TimeoutError, with what was seen, after ``timeout_s``."""
    start, seen = time.monotonic(), []
    while True:
        states = triton.states(name)
        answered = triton.ask(prompt, name=name, max_tokens=max_tokens).version
        if not seen or (seen[-1]["states"], seen[-1]["answered"]) != (states, answered):
            seen.append({"t": round(time.monotonic() - start, 1), "states": states, "answered": answered})
        if states.get(until_ready) == "READY":
            return seen
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"version {until_ready} of {name!r} not READY after {timeout_s} s; seen: {seen}")
        time.sleep(poll_s)
