"""The engine model's ``response_threads`` side by side: the same ensemble, on the same engine, with its
responses sent from the engine's event loop (0) or from threads of their own (scripts/triton/backend/
outbox.py says why), measured in one run with notebook 07's load generator and tables.

    python -m scripts.bench.response_threads --profile gpu-vllm --threads 0 1 4 --concurrency 32 256 \\
        --input-len 128 --output-len 128

Each count gets a repository of its own (the profile's Serve repository, filled from a copy of the
engine config that differs in ``response_threads`` alone) and a Triton of its own, started, measured and
stopped before the next one, so each engine has the GPU (or the CPU) to itself. Throughput and latency
are set against the first count. ``--py-spy S`` also samples the engine model's process for S seconds
during the first count's highest concurrency (``py-spy record``, where py-spy is installed and may
attach): where the stub's time goes.

Needs the engine built and the model made (notebooks 00-01).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from scripts.bench import compare
from scripts.bench.sweep import Target, bench_out_dir, bench_parser, ensemble_triton, load_settings, measured, plan
from scripts.bench.vllm_bench import run_plan
from scripts.engine.config import ENGINE_CONFIG, read_engine_config
from scripts.profiles import Profile, load_profile
from scripts.serve.config import fill_serve_repository
from scripts.triton.backend.outbox import thread_count
from scripts.triton.repository.fill import repository_facts

ENGINE_STUB_MODEL = "vllm_engine"


def variant_repository(profile: Profile, threads: int, root: Path) -> Path:
    """``root/repo-<threads>``: the profile's Serve repository, its engine pointed at ``root/engine-<threads>``,
    a copy of the profile's engine config with ``response_threads`` set to ``threads``."""
    if profile.engine != "vllm":
        raise ValueError(f"response_threads is a setting of the vLLM engine model; profile {profile.name!r} runs {profile.engine}")
    thread_count(threads)
    config = read_engine_config(profile.path("engine_dir"))
    engine_dir = root / f"engine-{threads}"
    engine_dir.mkdir(parents=True, exist_ok=True)
    (engine_dir / ENGINE_CONFIG).write_text(json.dumps(config | {"response_threads": threads}, indent=2) + "\n")
    repo = root / f"repo-{threads}"
    shutil.rmtree(repo, ignore_errors=True)
    fill_serve_repository(profile, output_dir=repo, engine_dir=engine_dir)
    return repo


def label(threads: int) -> str:
    return f"response_threads {threads}"


def stub_pid(server_pid: int, model: str = ENGINE_STUB_MODEL) -> int | None:
    """The Python-backend stub process of ``model`` under a tritonserver (its command line names the model)."""
    import psutil  # noqa: PLC0415

    for child in psutil.Process(server_pid).children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "triton_python_backend_stub" in cmdline and f"/{model}/" in cmdline:
            return child.pid
    return None


def py_spy_binary() -> str | None:
    """The ``py-spy`` program: on PATH, else where its wheel put it. ``env/wheelhouse.py install`` installs
    with ``pip --target``, which puts programs in ``TARGET/bin``, not on the venv's PATH."""
    found = shutil.which("py-spy")
    if found:
        return found
    try:
        dist = importlib.metadata.distribution("py-spy")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        path = Path(dist.locate_file(file)).resolve()
        if file.name == "py-spy" and path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def sample_stub(pid: int, seconds: int, out: Path) -> threading.Thread:
    """``py-spy record`` of ``pid`` for ``seconds`` (raw collapsed stacks, threads apart) into ``out``, in a
    thread; what py-spy says when it cannot attach lands in ``out`` with ``.log``."""
    py_spy = py_spy_binary()

    def record() -> None:
        if py_spy is None:
            out.with_suffix(".log").write_text("py-spy is not installed: pip install py-spy\n")
            return
        with open(out.with_suffix(".log"), "w") as log:
            subprocess.run([py_spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200",
                            "--format", "raw", "--threads", "--output", str(out)], stdout=log, stderr=log, check=False)

    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    return thread


def top_frames(raw: Path, limit: int = 15) -> list[tuple[str, float]]:
    """The innermost frames of a py-spy ``raw`` file (``stack;frames count`` lines) that took the most
    samples, with their share of all samples."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        leaf = stack.split(";")[-1]
        counts[leaf] = counts.get(leaf, 0) + int(n)
    return [(frame, n / total) for frame, n in sorted(counts.items(), key=lambda kv: -kv[1])[:limit]] if total else []


def run(profile: Profile, threads: list[int], concurrency: list[int], *, input_len: int, output_len: int,
        repeats: int, prompts_per_stream: int, out_dir: Path, py_spy_s: int = 0, start_timeout_s: float = 600) -> list[dict[str, Any]]:
    """Every count, one after the other; returns the measured rows (``compare``'s shape)."""
    rows: list[dict[str, Any]] = []
    for index, count in enumerate(threads):
        repo = variant_repository(profile, count, out_dir / "repos")
        facts = repository_facts(repo)
        with ensemble_triton(repo, profile, start_timeout_s, label(count)) as triton:
            runs = plan([Target(label(count), triton.http_url, "triton-ensemble")], concurrency,
                        served_model=profile["served_model_name"], tokenizer=facts.tokenizer_dir, input_len=input_len,
                        output_len=output_len, repeats=repeats, prompts_per_stream=prompts_per_stream)
            sampler = None
            if index == 0 and py_spy_s > 0:
                pid = stub_pid(triton.pid)
                top = max(concurrency)
                # start sampling as the first measured run at the top concurrency starts
                marker = next(i for i, r in enumerate(runs) if r["repeat"] == 0 and r["concurrency"] == top)
                head, tail = runs[:marker], runs[marker:]
                rows += measured(run_plan(head, out_dir / f"threads-{count}-a"))  # the warm-up is in head
                sampler = sample_stub(pid, py_spy_s, out_dir / f"py-spy-threads-{count}.txt") if pid else None
                runs = tail
            rows += measured(run_plan(runs, out_dir / f"threads-{count}"))
            if sampler is not None:
                sampler.join(timeout=py_spy_s + 30)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--threads", type=int, nargs="+", default=[0, 1, 4], help="counts to compare; the first is the baseline")
    parser.add_argument("--py-spy", type=int, default=0, metavar="S", help="sample the engine model's process for S seconds")
    parser.add_argument("--out", type=Path, default=None, help="default: build/results/bench/response-threads-<profile>")
    args = parser.parse_args(argv)
    if len(set(args.threads)) != len(args.threads):
        parser.error(f"--threads counts must differ, got {args.threads}")
    profile = load_profile(args.profile)
    out_dir = bench_out_dir(args.out, "response-threads", profile.name)
    try:
        rows = run(profile, args.threads, args.concurrency, **load_settings(args), out_dir=out_dir, py_spy_s=args.py_spy)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(compare.side_by_side(rows, label(args.threads[0]), out_dir))
    for raw in sorted(out_dir.glob("py-spy-*.txt")):
        print(f"\n{raw.name}: the innermost frames with the most samples")
        for frame, share in top_frames(raw):
            print(f"  {share:6.1%}  {frame}")
    failed = sum(int(r.get("failed", 0)) for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
