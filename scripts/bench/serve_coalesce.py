"""A replica's ``coalesce_chunks`` side by side: the same Serve application on the same Triton, its
replica sending every response of the engine as an event of its own (off) or what arrived while it
was busy as one event (on; scripts/serve/streaming.py, :func:`coalesced`), measured in one run with
notebook 07's load generator and tables.

    python -m scripts.bench.serve_coalesce --profile cpu --concurrency 8 32 64
    python -m scripts.bench.serve_coalesce --profile gpu-vllm --concurrency 1 32 256 --input-len 128 --output-len 128

One Triton (the profile's Serve repository, the engine model) and one Ray cluster; two applications of
one replica each, attached to that Triton and differing in ``coalesce_chunks`` alone, measured in turns
(``scripts.bench.sweep.plan`` interleaves them). ``--direct-ingress`` measures them on their replicas' own
ports (``RAY_SERVE_THROUGHPUT_OPTIMIZED``) instead of through Serve's proxy. Throughput and latency are
set against ``off``. Needs the engine built and the model made (notebooks 00-01).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from scripts.bench import compare
from scripts.bench.sweep import Target, measured, plan
from scripts.bench.vllm_bench import run_plan
from scripts.engine.config import triton_load_args
from scripts.paths import build_dir
from scripts.profiles import Profile, load_profile

#: The two applications: route prefix and name, and their replicas' ``coalesce_chunks``.
VARIANTS = {"apart": False, "coalesced": True}


def label(on: bool) -> str:
    return f"coalesce_chunks {'on' if on else 'off'}"


def run(profile: Profile, concurrency: list[int], *, input_len: int, output_len: int, repeats: int,
        prompts_per_stream: int, out_dir: Path, direct_ingress: bool = False, num_cpus: int = 4,
        start_timeout_s: float = 600) -> list[dict[str, Any]]:
    """Both applications, measured in turns; returns the measured rows (``compare``'s shape)."""
    from ray import serve  # noqa: PLC0415

    from scripts.lab.cluster import LocalCluster  # noqa: PLC0415
    from scripts.lab.serve_state import DIRECT_INGRESS_ENV, ingress_urls  # noqa: PLC0415
    from scripts.serve.app import app_builder  # noqa: PLC0415
    from scripts.serve.config import fill_serve_repository, serve_repo_dir  # noqa: PLC0415
    from scripts.triton.repository.fill import repository_facts  # noqa: PLC0415
    from scripts.triton.server import TritonServer  # noqa: PLC0415

    fill_serve_repository(profile)
    repo = serve_repo_dir(profile)
    facts = repository_facts(repo)
    triton = TritonServer(repo, extra_args=("--model-control-mode=explicit", "--load-model=ensemble",
                                            *triton_load_args(profile)))
    started = time.monotonic()
    triton.start(timeout_s=start_timeout_s)
    try:
        print(f"Triton ready after {time.monotonic() - started:.0f} s", flush=True)
        with LocalCluster(num_cpus=num_cpus, serve_env=DIRECT_INGRESS_ENV if direct_ingress else {}) as cluster:
            targets = []
            for name, on in VARIANTS.items():
                serve.run(app_builder({"profile": profile.name, "num_replicas": 1, "triton_url": triton.grpc_url,
                                       "triton_model": "engine", "coalesce_chunks": on}), name=name, route_prefix=f"/{name}")
                url = ingress_urls(name)[0] if direct_ingress else f"{cluster.base_url}/{name}"
                targets.append(Target(label(on), url))
            print("applications running:", ", ".join(f"{t.label} at {t.base_url}" for t in targets), flush=True)
            runs = plan(targets, concurrency, served_model=profile["served_model_name"], tokenizer=facts.tokenizer_dir,
                        input_len=input_len, output_len=output_len, repeats=repeats, prompts_per_stream=prompts_per_stream)
            rows = measured(run_plan(runs, out_dir / "runs"))
            serve.shutdown()
    finally:
        triton.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32])
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompts-per-stream", type=int, default=4)
    parser.add_argument("--direct-ingress", action="store_true", help="call the replicas on their own ports")
    parser.add_argument("--num-cpus", type=int, default=4, help="Ray's logical CPUs (each replica reserves the profile's)")
    parser.add_argument("--out", type=Path, default=None, help="default: build/results/bench/serve-coalesce-<profile>")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    out_dir = (args.out or build_dir() / "results" / "bench" / f"serve-coalesce-{profile.name}").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        rows = run(profile, args.concurrency, input_len=args.input_len, output_len=args.output_len, repeats=args.repeats,
                   prompts_per_stream=args.prompts_per_stream, out_dir=out_dir, direct_ingress=args.direct_ingress,
                   num_cpus=args.num_cpus)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(compare.side_by_side(rows, label(False), out_dir))
    return 1 if sum(int(r.get("failed", 0)) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
