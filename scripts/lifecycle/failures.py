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


def serving_user(requested: str) -> tuple[str, str | None]:
    """Who the permissions lesson serves as: ``(user, run_as)``. Root can drop to ``requested``
    (``TritonServer(run_as=...)``, setpriv); anyone else cannot switch users, so the server runs as
    themselves (``run_as`` None) and the lesson takes their own read permission away instead."""
    if os.geteuid() == 0:
        return requested, requested
    import pwd  # noqa: PLC0415

    return pwd.getpwuid(os.geteuid()).pw_name, None


def private_copy(model_dir: Path, repo: Path, name: str, user: str) -> Path:
    """A copy of the model in ``repo/name`` with copies of the checkpoints it names (in
    ``repo/checkpoints``, its ``model.json`` files pointing there), as a deployment copies them: the
    model folder closed to ``user`` (:func:`close_to`), and each checkpoint's weights with the mode
    ``save_pretrained`` gives ``model.safetensors`` here (0600; the tokenizer files beside it get
    0644), or, when ``user`` owns the copy, with no read permission at all. Earlier runs or a
    reader's ``chmod`` of the originals change nothing."""
    folder = copy_model(model_dir, repo, name)
    for model_json in sorted(folder.glob("*/model.json")):
        arguments = json.loads(model_json.read_text())
        source = Path(arguments["model"])
        target = repo / "checkpoints" / f"v{model_json.parent.name}-{source.name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        for weights in target.glob("*.safetensors"):
            weights.chmod(stat.S_IWUSR if _owns(user, weights) else stat.S_IRUSR | stat.S_IWUSR)
        arguments.update({k: str(target) for k in ("model", "tokenizer") if arguments.get(k) == str(source)})
        model_json.write_text(json.dumps(arguments, indent=2) + "\n")
    close_to(folder, user)
    return folder


def _owns(user: str, path: Path) -> bool:
    import pwd  # noqa: PLC0415

    return path.stat().st_uid == pwd.getpwnam(user).pw_uid


def close_to(folder: Path, user: str) -> None:
    """Modes that keep ``user`` out of ``folder``: owner-only (0700 folders, 0600 files, as a copy made
    with a umask of 077 leaves them) when another user owns it; when ``user`` owns it, the owner's
    read permission goes too (0300 folders, 0200 files: it may still write, as a copy in progress)."""
    owner = _owns(user, folder)
    for path in [*sorted(folder.rglob("*"), reverse=True), folder]:  # the folder last: it must stay listable until then
        if path.is_dir():
            path.chmod(stat.S_IWUSR | stat.S_IXUSR if owner else stat.S_IRWXU)
        else:
            path.chmod(stat.S_IWUSR if owner else stat.S_IRUSR | stat.S_IWUSR)


def make_readable(folder: Path) -> None:
    """The fix of :func:`close_to`: everyone may read the files and enter the folders (``chmod -R a+rX``)."""
    folder.chmod(folder.stat().st_mode | _READ_BITS | (_ENTER_BITS if folder.is_dir() else 0))
    if folder.is_dir():
        for root, dirs, files in os.walk(folder):  # top-down: each folder opened before it is listed
            for name in dirs:
                path = Path(root, name)
                path.chmod(path.stat().st_mode | _READ_BITS | _ENTER_BITS)
            for name in files:
                path = Path(root, name)
                path.chmod(path.stat().st_mode | _READ_BITS)


_READ_BITS = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
_ENTER_BITS = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def fresh_dir(path: Path) -> Path:
    """An empty folder at ``path``, whatever modes an earlier run left inside it."""
    if path.exists():
        make_readable(path)
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def served_paths(model_folder: Path) -> list[Path]:
    """Everything a server reads for one model: its folder, and the checkpoints its versions' ``model.json`` name
    (those this process can read: a folder closed to it hides them, as it hides them from the server)."""
    paths = [model_folder]
    for model_json in sorted(model_folder.glob("*/model.json")):
        try:
            arguments = json.loads(model_json.read_text())
        except PermissionError:
            continue
        paths += sorted({Path(arguments[key]) for key in ("model", "tokenizer") if arguments.get(key)})
    return paths


def unreadable_for(user: str, paths: list[Path]) -> list[Path]:
    """The files and folders under ``paths`` that ``user`` cannot read (or enter), by their mode bits:
    the check a root shell cannot make by trying, since root reads everything. A folder this process
    cannot list is reported, not entered."""
    import pwd  # noqa: PLC0415

    entry = pwd.getpwnam(user)
    found = []
    for top in paths:
        for path in _listable(top):
            st = path.stat()
            mode = st.st_mode
            bits = (stat.S_IRUSR | stat.S_IXUSR, stat.S_IRGRP | stat.S_IXGRP, stat.S_IROTH | stat.S_IXOTH)
            who = 0 if st.st_uid == entry.pw_uid else 1 if st.st_gid == entry.pw_gid else 2
            need = bits[who] if path.is_dir() else bits[who] & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            if mode & need != need:
                found.append(path)
    return found


def _listable(top: Path):
    """``top`` and, in sorted order, everything under it that this process can list."""
    yield top
    if top.is_dir():
        try:
            children = sorted(top.iterdir())
        except PermissionError:
            return
        for child in children:
            yield from _listable(child)


#: What varies from run to run at the start of a log line: Triton's glog prefix (severity, date, time,
#: thread id: ``E1204 16:28:25.841686 26217 ``), terminal colours and the PID in vLLM's ``(Worker pid=N)``.
_RUN_PREFIX = re.compile(r"^[IWE]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ |\x1b\[[0-9;]*m")
_PID = re.compile(r"\((\w+) pid=\d+\)")


def error_lines(log: str, pattern: str = r"(?i)error|failed|denied") -> list[str]:
    """The lines of a Triton log (or start error) that say what failed, without Triton's tables and
    without what differs between runs at their start (so a line cut to a width reads the same)."""
    return [_PID.sub(r"(\1)", _RUN_PREFIX.sub("", line)).strip() for line in log.splitlines()
            if re.search(pattern, line) and not line.startswith("|")]


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


class VersionWatch:
    """What a client of a polling server sees of one model, change by change: its version states and
    the version that answers an unpinned request. ``seen``: ``{"t", "states", "answered"}`` per change
    (``answered`` None on an error); ``steps``: ``(t, what)`` for each change made to the repository."""

    def __init__(self, triton, name: str, prompt: str, max_tokens: int = 4, log_tail=None):
        self.triton, self.name, self.prompt, self.max_tokens = triton, name, prompt, max_tokens
        self.log_tail = log_tail  # () -> str: the server's log, for a timeout's message
        self.start = time.monotonic()
        self.seen: list[dict] = []
        self.steps: list[tuple[float, str]] = []

    def now(self) -> float:
        return round(time.monotonic() - self.start, 1)

    def step(self, what: str) -> None:
        self.steps.append((self.now(), what))

    def poll(self) -> dict[str, str]:
        states = self.triton.states(self.name)
        answered = self.triton.ask(self.prompt, name=self.name, max_tokens=self.max_tokens).version
        if not self.seen or (self.seen[-1]["states"], self.seen[-1]["answered"]) != (states, answered):
            self.seen.append({"t": self.now(), "states": states, "answered": answered})
        return states

    def until(self, version: str, state: str, timeout_s: float, poll_s: float = 0.5, why: str = "") -> list[dict]:
        """Poll until ``version`` is in ``state``; returns what was seen. Raises TimeoutError after
        ``timeout_s`` with what was seen and the server's log tail."""
        deadline = time.monotonic() + timeout_s
        while self.poll().get(version) != state:
            if time.monotonic() > deadline:
                tail = f"\nthe server's log ends:\n{self.log_tail()}" if self.log_tail else ""
                raise TimeoutError(f"waited {timeout_s:g} s for version {version} of {self.name!r} to be {state}"
                                   f"{f' ({why})' if why else ''}; seen: {self.seen}{tail}")
            time.sleep(poll_s)
        return self.seen


def half_copy(watch: VersionWatch, source: Path, target: Path, timeout_s: float, poll_s: float = 0.5) -> list[dict]:
    """Copy the version folder ``source`` into a polled repository as ``cp -r`` or a slow sync does:
    the folder first, empty; its files only once the server has tried that folder and reported the
    version UNAVAILABLE (seen, not timed: a fixed delay misses the poll on a slow machine); then wait
    until the version is READY. Returns what ``watch`` saw."""
    target.mkdir()
    watch.step(f"created {target.name}/ (empty)")
    watch.until(target.name, "UNAVAILABLE", timeout_s, poll_s, why="the server tries the empty folder and fails")
    names = sorted(p.name for p in source.iterdir())
    for name in names:
        shutil.copy2(source / name, target / name)
    os.utime(target)
    watch.step(f"copied {', '.join(names)}")
    return watch.until(target.name, "READY", timeout_s, poll_s, why="the next poll loads the complete folder")


def watch_versions(triton, name: str, prompt: str, until_ready: str, timeout_s: float, poll_s: float = 0.5,
                   max_tokens: int = 4) -> list[dict]:
    """Poll a model's version states and ask it ``prompt`` (no version) until version ``until_ready``
    is READY; returns each change seen (:class:`VersionWatch`). Raises TimeoutError, with what was
    seen, after ``timeout_s``."""
    return VersionWatch(triton, name, prompt, max_tokens).until(until_ready, "READY", timeout_s, poll_s)
