"""Tables of docs/gpu-runs/README.md rendered from the committed records of GPU runs, never typed by hand.

A block of the page between ``<!-- record: PATH -->`` and ``<!-- /record -->`` is the table of the record
PATH (relative to docs/gpu-runs/); ``python -m scripts.bench.gpu_records`` writes every block anew from its
file, ``--check`` only says which differ (a unit test runs it, so a table cannot drift from its record).
A record of :mod:`scripts.bench.readme_app` (``medians`` and ``ratios`` rows, ``command``, ``commit``,
``gpu``) gives one row per route and concurrency: both sides' output tok/s, the ratio, TTFT p50 and ITL p50.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from scripts.bench.readme_app import APP, PEER, ROUTES, label
from scripts.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "gpu-runs" / "README.md"
BLOCK = re.compile(r"(<!-- record: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /record -->)", re.S)


def readme_app_table(record: dict[str, Any]) -> str:
    """The markdown table of a readme_app record (see the module's text), with the line that names its run."""
    medians = {(r["label"], r["concurrency"]): r for r in record["medians"]}
    ratios = {(r["label"], r["concurrency"]): r for r in record["ratios"]}
    lines = [f"`{record['command']}` on {record['gpu']}, main at {record['commit'][:7]}:", "",
             "| route | streams | `vllm serve` tok/s | README app tok/s | ratio | TTFT p50 ms (vllm / app) | ITL p50 ms (vllm / app) |",
             "|---|---|---|---|---|---|---|"]
    for route in ROUTES:
        for c in sorted({c for (lab, c) in medians if lab == label(APP, route)}):
            peer, app, ratio = medians[(label(PEER, route), c)], medians[(label(APP, route), c)], ratios[(label(APP, route), c)]
            lines.append(f"| {route} | {c} | {peer['output_throughput']:,.0f} | {app['output_throughput']:,.0f} | "
                         f"{ratio['throughput_ratio']:.2f} | {peer['median_ttft_ms']:.0f} / {app['median_ttft_ms']:.0f} | "
                         f"{peer['median_itl_ms']:.2f} / {app['median_itl_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def render(text: str, root: Path) -> str:
    """``text`` with every record block written anew from its file under ``root``."""
    return BLOCK.sub(lambda m: m.group(1) + readme_app_table(json.loads((root / m.group("path")).read_text()))
                     + m.group(4), text)


def stale_blocks(page: Path = PAGE) -> list[str]:
    """The record paths whose block in ``page`` differs from what their file renders."""
    text = page.read_text()
    fresh = {m.group("path"): m.group("body") for m in BLOCK.finditer(render(text, page.parent))}
    return [m.group("path") for m in BLOCK.finditer(text) if fresh[m.group("path")] != m.group("body")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list the blocks that differ from their record")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_blocks(args.page)
        for path in stale:
            print(f"{args.page}: the table of {path} differs from the record: python -m scripts.bench.gpu_records")
        return 1 if stale else 0
    args.page.write_text(render(args.page.read_text(), args.page.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
