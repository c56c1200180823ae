"""Fill ``${placeholders}`` in Triton ``config.pbtxt`` templates, strictly.

The command line has the shape of TensorRT-LLM's ``tools/fill_template.py``::

    python -m scripts.triton.repository.fill_template [-i] FILE "key:value,key:value" [--allow-unfilled a,b]

Inside the substitution string a backslash escapes the next character: ``\\,`` is a
comma and ``\\:`` a colon inside a value, ``\\\\`` a backslash. Unlike upstream, a key
that is not a placeholder of the file is an error, and so is any ``${...}`` left after
filling unless it is named in ``allow_unfilled``.
"""
from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

#: A model folder's configuration file (the linter reads it too).
CONFIG = "config.pbtxt"
#: Editor and interpreter leftovers: never copied out of a template repository, never linted.
JUNK = (".ipynb_checkpoints", "__pycache__")
_PLACEHOLDER = re.compile(r"\$\{([^${}\n]+)\}")
_ESCAPABLE = {",", ":", "\\"}


class TemplateError(ValueError):
    """A template, a substitution string or a value does not fit; the message says what to fix."""


def placeholders(text: str) -> list[str]:
    """Names of the ``${name}`` placeholders in ``text``, in order of first appearance."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(text)))


def _split_unescaped(s: str, sep: str) -> list[str]:
    """Split ``s`` on ``sep`` where it is not escaped; escapes are kept for a later pass."""
    parts, current, i = [], [], 0
    while i < len(s):
        char = s[i]
        if char == "\\":
            current.append(s[i : i + 2])
            i += 2
            continue
        if char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(s: str, where: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] != "\\":
            out.append(s[i])
            i += 1
            continue
        nxt = s[i + 1 : i + 2]
        if nxt not in _ESCAPABLE:
            shown = "a trailing '\\'" if not nxt else f"'\\{nxt}'"
            raise TemplateError(
                f"{where}: {shown} is not an escape; only '\\,' '\\:' and '\\\\' are "
                "(write '\\\\' for a literal backslash)"
            )
        out.append(nxt)
        i += 2
    return "".join(out)


def parse_substitutions(s: str) -> dict[str, str]:
    """Parse ``"key:value,key:value"`` into a dict (an empty string gives ``{}``).

    Keys are stripped of surrounding blanks; values are kept as written after unescaping.
    """
    if not s.strip():
        return {}
    values: dict[str, str] = {}
    for number, pair in enumerate(_split_unescaped(s, ","), start=1):
        where = f"substitution {number} ({pair!r})"
        if not pair.strip():
            raise TemplateError(
                f"substitution {number} is empty: remove the stray ',' or escape it as '\\,' "
                "inside a value"
            )
        pieces = _split_unescaped(pair, ":")
        if len(pieces) == 1:
            raise TemplateError(f"{where} has no ':'; write it as key:value")
        if len(pieces) > 2:
            raise TemplateError(
                f"{where} has more than one ':'; escape a colon inside the value as '\\:' "
                "or separate pairs with ','"
            )
        key = _unescape(pieces[0], where).strip()
        if not key:
            raise TemplateError(f"{where} has an empty key; write it as key:value")
        if key in values:
            raise TemplateError(f"key {key!r} is given twice; keep one of its values")
        values[key] = _unescape(pieces[1], where)
    return values


def _as_text(key: str, value: object) -> str:
    if isinstance(value, bool):  # protobuf text format spells booleans in lower case
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise TemplateError(f"value of {key!r} is a {type(value).__name__}; give a str, int, float or bool")


def fill_text(
    text: str,
    values: Mapping[str, object],
    allow_unfilled: Iterable[str] = (),
    source: str = "<text>",
) -> str:
    """Replace each ``${key}`` in ``text`` by ``values[key]``.

    Raises TemplateError for a key that is not a placeholder of ``text`` and for any
    ``${...}`` still in the result whose name is not in ``allow_unfilled``. ``source``
    names the text in messages.
    """
    names = placeholders(text)
    unknown = [key for key in values if key not in names]
    if unknown:
        raise TemplateError(_unknown_keys_message(unknown, names, source))
    filled = {key: _as_text(key, value) for key, value in values.items()}
    result = _PLACEHOLDER.sub(lambda m: filled.get(m.group(1), m.group(0)), text)

    allowed = set(allow_unfilled)
    lines: dict[str, list[int]] = {}
    for match in _PLACEHOLDER.finditer(result):
        if match.group(1) not in allowed:
            lines.setdefault(match.group(1), []).append(result.count("\n", 0, match.start()) + 1)
    if lines:
        listing = "; ".join(
            f"${{{name}}} (line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))})"
            for name, at in lines.items()
        )
        raise TemplateError(
            f"{source}: unfilled placeholders: {listing}. Give each a value (key:value), "
            f"or allow it to stay with allow_unfilled / --allow-unfilled {','.join(lines)}"
        )
    return result


def _unknown_keys_message(unknown: list[str], names: list[str], source: str) -> str:
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, names, n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    known = ", ".join(names) if names else "none"
    return (
        f"{source}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(parts)}: "
        f"not a placeholder of this file. Its placeholders are: {known}"
    )


def fill_file(
    src: str | Path,
    dst: str | Path | None = None,
    values: Mapping[str, object] | None = None,
    allow_unfilled: Iterable[str] = (),
) -> Path:
    """Fill the template ``src`` with ``values`` and write it to ``dst`` (``None``: in place).

    Nothing is written when filling fails. Returns the path written.
    """
    src = Path(src)
    text = fill_text(src.read_text(), values or {}, allow_unfilled, source=str(src))
    out = src if dst is None else Path(dst)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def fill_repository(
    template_dir: str | Path,
    output_dir: str | Path,
    values_by_model: Mapping[str, Mapping[str, object]],
    allow_unfilled: Iterable[str] = (),
    models: Iterable[str] | None = None,
    extra_files: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Path]:
    """Copy every model of the template repository into ``output_dir``, filling its config.

    A model is a folder of ``template_dir`` holding a ``config.pbtxt``; it is copied whole
    (version folders included, ``.ipynb_checkpoints`` and ``__pycache__`` left out) with its
    config filled from ``values_by_model[model]`` (no entry: no values) and the files of
    ``extra_files[model]`` (path in the model folder: text) added. An existing ``output_dir/<model>``
    is replaced; other contents of ``output_dir`` are left alone. Every config is filled before
    anything is written, so a failure writes nothing.

    Each model is assembled beside its destination first: a model folder that would come out the
    same is left untouched (a Triton loading it, or another notebook filling the same repository
    at the same time, sees no change), and a different one is swapped in by renames.
    ``models`` limits the copy to those template models (a profile's selection).
    Returns the model folders written.
    """
    template_dir, output_dir = Path(template_dir).resolve(), Path(output_dir).resolve()
    if not template_dir.is_dir():
        raise TemplateError(f"template repository {template_dir} is not a directory")
    if output_dir == template_dir or output_dir.is_relative_to(template_dir):
        raise TemplateError(
            f"output directory {output_dir} is inside the template repository {template_dir}: "
            "choose an output directory outside it (e.g. under the build directory)"
        )
    if template_dir.is_relative_to(output_dir):
        raise TemplateError(
            f"template repository {template_dir} is inside the output directory {output_dir}: "
            "choose an output directory that does not contain the templates"
        )
    available = sorted(p.name for p in template_dir.iterdir() if (p / CONFIG).is_file())
    if not available:
        raise TemplateError(f"{template_dir} has no model folders (folders with a {CONFIG})")
    if models is None:
        models = available
    else:
        models = sorted(set(models))
        unknown = sorted(set(models) - set(available))
        if unknown:
            raise TemplateError(f"no template model {', '.join(map(repr, unknown))} in {template_dir}; "
                                f"its models are: {', '.join(available)}")
    extra = sorted(set(values_by_model) - set(models))
    if extra:
        raise TemplateError(
            f"values given for {', '.join(map(repr, extra))}, not models being filled from {template_dir}; "
            f"those are: {', '.join(models)}"
        )
    allowed = tuple(allow_unfilled)
    configs = {
        model: fill_text(
            (template_dir / model / CONFIG).read_text(),
            values_by_model.get(model, {}),
            allowed,
            source=str(template_dir / model / CONFIG),
        )
        for model in models
    }
    written = []
    output_dir.mkdir(parents=True, exist_ok=True)
    for model, text in configs.items():
        dest = output_dir / model
        # beside the repository, not in it (a Triton scanning the repository never sees it); one filesystem: renames
        staged = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.{model}.filling-", dir=output_dir.parent))
        try:
            shutil.copytree(template_dir / model, staged, ignore=shutil.ignore_patterns(*JUNK), dirs_exist_ok=True)
            (staged / CONFIG).write_text(text)
            for rel, content in (extra_files or {}).get(model, {}).items():
                (staged / rel).parent.mkdir(parents=True, exist_ok=True)
                (staged / rel).write_text(content)
            staged.chmod(0o755)  # mkdtemp makes it 0700
            _put_in_place(staged, dest)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        written.append(dest)
    return written


def _put_in_place(staged: Path, dest: Path, attempts: int = 5) -> None:
    """``dest`` becomes what ``staged`` holds: left alone if it holds that already, else swapped by
    renames. Another process filling the same folder at the same moment can move ``dest`` between
    two renames here (a rename then fails): look again, and stop once ``dest`` holds the same."""
    retired = staged.with_name(f"{staged.name}.old")
    for attempt in range(attempts):
        if dest.is_dir() and same_tree(staged, dest):
            return
        try:
            if dest.exists():
                dest.rename(retired)
            staged.rename(dest)
            return
        except OSError:  # dest went away, or came back, under another filler
            if attempt == attempts - 1:
                raise
        finally:
            shutil.rmtree(retired, ignore_errors=True)


def same_tree(a: Path, b: Path) -> bool:
    """Whether two folders hold the same files with the same bytes (``JUNK`` left out)."""
    def files(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*")
                if p.is_file() and not set(p.relative_to(root).parts) & set(JUNK)}

    left, right = files(a), files(b)
    return left.keys() == right.keys() and all(left[k].read_bytes() == right[k].read_bytes() for k in left)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.triton.repository.fill_template",
        description="Fill ${placeholders} of a Triton config.pbtxt template, strictly.",
    )
    parser.add_argument("-i", "--in_place", action="store_true", help="write FILE in place instead of printing")
    parser.add_argument("file_path", metavar="FILE", help="the template (config.pbtxt) to fill")
    parser.add_argument(
        "substitutions",
        help="key:value pairs separated by ','; escape ',' ':' and '\\' inside values with '\\'",
    )
    parser.add_argument(
        "--allow-unfilled",
        default="",
        metavar="NAMES",
        help="comma-separated placeholder names that may stay unfilled",
    )
    args = parser.parse_args(argv)
    allowed = [name.strip() for name in args.allow_unfilled.split(",") if name.strip()]
    try:
        values = parse_substitutions(args.substitutions)
        if args.in_place:
            fill_file(args.file_path, None, values, allowed)
        else:
            path = Path(args.file_path)
            sys.stdout.write(fill_text(path.read_text(), values, allowed, source=str(path)))
    except TemplateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot read or write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
