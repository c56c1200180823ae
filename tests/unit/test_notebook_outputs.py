"""The committed outputs of notebooks/*.ipynb are written for a reader (CONTRIBUTING.md, "Notebooks a
reader finishes"), checked without running anything:

* no ANSI escape sequences (a colour code is noise in a diff, on GitHub and in nbval's comparison);
* no log lines of Ray, Serve, vLLM or Triton, unless the cell is tagged ``shows-logs`` (it teaches
  the line: a Serve controller's warning, say); their logs stay in their files;
* no table longer than ``MAX_TABLE_ROWS`` rows (the summary is shown, the full table goes to the
  results files) and no cell longer than ``MAX_CELL_LINES`` lines (a progress stream is one line
  per target, or one bar);
* no embedded image over ``MAX_IMAGE_BYTES`` in the notebook file (base64 included).
"""
from __future__ import annotations

import base64
import json
import re

import pytest

from scripts.paths import NOTEBOOK_DIR

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
SHOWS_LOGS_TAG = "shows-logs"
MAX_TABLE_ROWS = 15
MAX_CELL_LINES = 40
MAX_IMAGE_BYTES = 150 * 1000

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
LOG_LINE = re.compile("|".join([
    r"^\((?:raylet|autoscaler[^)]*|pid=\d+|[\w.:<>-]+ pid=\d+)(?:, ip=[\d.]+)?\) ",    # Ray's driver log forwarding
    r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d ",  # vLLM's logger
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ",       # Ray Serve's logger
    r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+.*\b(?:DEBUG|INFO|WARNING|ERROR)\b",  # Ray core, logging's asctime
    r"^[\d:,. -]*\[?[IWE]\] ",                                                          # Ray core's C++ level letter
    r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ",                                # Triton's (glog) prefix
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:",                                  # logging.basicConfig's format
]), re.MULTILINE)
DASHES = re.compile(r"^ *-{3,}(?: +-{3,})* *$")                # the rule under a plain-text table's header
MARKDOWN_RULE = re.compile(r"^ *\|? *:?-{3,}:? *(?:\| *:?-{3,}:? *)+\|? *$")


def outputs(path):
    """(cell index, tags, output) of every output of every code cell."""
    cells = json.loads(path.read_text())["cells"]
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            yield index, cell["metadata"].get("tags", []), output


def texts(output) -> list[str]:
    """What a reader reads of one output: a stream, each text representation, a traceback."""
    if output["output_type"] == "stream":
        return ["".join(output["text"])]
    if output["output_type"] == "error":
        return ["\n".join(output.get("traceback", []))]
    data = output.get("data", {})
    return ["".join(value) for key, value in data.items() if key.startswith("text/")]


def shown_text(output) -> str:
    """The one representation a frontend shows: html, else markdown, else plain text."""
    data = output.get("data", {})
    for key in ("text/html", "text/markdown", "text/plain"):
        if key in data:
            return "".join(data[key])
    return "".join(texts(output))


def log_lines(text: str) -> list[str]:
    plain = ANSI.sub("", text)
    return [plain[m.start():plain.find("\n", m.start()) % (len(plain) + 1)][:120] for m in LOG_LINE.finditer(plain)]


def table_lengths(text: str) -> list[int]:
    """Rows of every table in ``text``: plain text (a header over a rule of dashes, rows to the next
    blank line), markdown (a ``|---|`` rule) and HTML (``<tr>`` of each ``<table>``, the header left out)."""
    found = [max(0, len(re.findall(r"<tr\b", table)) - 1) for table in re.findall(r"<table\b.*?</table>", text, re.S)]
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if i and (DASHES.match(line) or MARKDOWN_RULE.match(line)) and lines[i - 1].strip():
            rows = 0
            for row in lines[i + 1:]:
                if not row.strip():
                    break
                rows += 1
            found.append(rows)
    return found


def image_sizes(output) -> dict[str, int]:
    """Bytes each image takes in the notebook file (a PNG as its base64 text: 4/3 of the PNG)."""
    return {key: len("".join(value).encode()) for key, value in output.get("data", {}).items() if key.startswith("image/")}


def problems(path) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    lines: dict[int, int] = {}
    for index, tags, output in outputs(path):
        says = found.setdefault(index, [])
        for text in texts(output) if output["output_type"] != "error" else []:  # a traceback is coloured by design
            if ANSI.search(text):
                says.append(f"ANSI escape {ANSI.search(text).group()!r}")
            if SHOWS_LOGS_TAG not in tags:
                says += [f"log line {line!r}" for line in log_lines(text)]
        shown = shown_text(output)
        says += [f"table of {rows} rows (more than {MAX_TABLE_ROWS})" for rows in table_lengths(shown) if rows > MAX_TABLE_ROWS]
        says += [f"{kind} of {size / 1000:.0f} KB (more than {MAX_IMAGE_BYTES / 1000:.0f} KB)"
                 for kind, size in image_sizes(output).items() if size > MAX_IMAGE_BYTES]
        if "text/html" not in output.get("data", {}):
            lines[index] = lines.get(index, 0) + len(shown.splitlines())
    for index, count in lines.items():
        if count > MAX_CELL_LINES:
            found[index].append(f"{count} lines of output (more than {MAX_CELL_LINES})")
    return {index: says for index, says in found.items() if says}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_are_for_a_reader(path):
    found = problems(path)
    assert not found, f"{path.name} (cell index: problems): " + json.dumps(found, indent=1, ensure_ascii=True)


def test_the_checks_find_what_they_look_for():
    coloured = "\x1b[33m(raylet)\x1b[0m Task ServeController.graceful_shutdown failed."
    assert ANSI.search(coloured) and log_lines(coloured)
    for line in ["(ServeController pid=123) INFO 12-05 10:00:00 started",
                 "(ServeReplica:llm:TritonLLM pid=77, ip=10.0.0.2) hello",
                 "INFO 12-05 23:54:05 [api_server.py:1] vLLM API server",
                 "WARNING 2026-12-05 21:20:57,430 controller 12828 -- Deployment 'TooBig' ...",
                 "2026-12-05 23:54:05,550\tINFO worker.py:1 -- Started a local Ray instance.",
                 "I1205 23:54:05.550123 1234 server.cc:674] started",
                 "WARNING:ray.serve:deprecated"]:
        assert log_lines(line), line
    for line in ["pending observed after 2.6 s", "Result: OK (every deployment fits)", "WARNING is a word here"]:
        assert not log_lines(line), line
    table = "label  c\n-----  ---\n" + "".join(f"row{i}  {i}\n" for i in range(16)) + "\nafter\n"
    assert table_lengths(table) == [16]
    assert table_lengths("| a | b |\n|---|---|\n| 1 | 2 |\n") == [1]
    assert table_lengths("<table><tr><th>a</th></tr><tr><td>1</td></tr></table>") == [1]
    assert image_sizes({"data": {"image/png": base64.b64encode(b"x" * 999).decode()}}) == {"image/png": 1332}
