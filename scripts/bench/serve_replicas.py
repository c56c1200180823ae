"""Replicas of the Serve application side by side, attached to one Triton: does spreading the replica's
work over more processes buy throughput? Measured in one run with notebook 07's load generator and tables.

    python -m scripts.bench.serve_replicas --profile gpu-vllm --replicas 1 2 4 --concurrency 32 256 \\
        --input-len 128 --output-len 128

One Triton (the profile's Serve repository) and one Ray cluster; per count N an application of N replicas,
all attached to that Triton and calling its engine model (``mode: attached``: the replicas hold no
engine, so any count fits one GPU), measured in turns through Serve's proxy (``scripts.bench.sweep.plan``
interleaves them). The cluster runs with ``RAY_SERVE_THROUGHPUT_OPTIMIZED`` (the README's fast path:
the proxy talks gRPC to the replicas) unless ``--classic-proxy``; ``--direct-ingress`` adds the first
application's first replica on its own port, the proxy hop gone. Throughput and latency are set against
the first count. Notebook 07 on a GPU says why to ask: there one replica's Python process was the limit
of the direct ingress at 256 streams (docs/gpu-runs/README.md, ``h100-vllm/``).

Needs the engine built and the model made (notebooks 00-01).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.bench import compare
from scripts.bench.sweep import Target, bench_out_dir, bench_parser, ensemble_triton, load_settings, measured, plan
from scripts.bench.vllm_bench import run_plan
from scripts.profiles import Profile, load_profile


def label(replicas: int, how: str = "proxy") -> str:
    return f"{replicas} replica{'s' if replicas != 1 else ''}, {how}"


def check_counts(replicas: list[int]) -> list[int]:
    """The replica counts to compare: whole numbers of at least 1, each once."""
    if not replicas or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in replicas):
        raise ValueError(f"replica counts must be whole numbers of at least 1, got {replicas}")
    if len(set(replicas)) != len(replicas):
        raise ValueError(f"replica counts must differ, got {replicas}")
    return replicas


def logical_cpus(profile: Profile, replicas: list[int]) -> int:
    """Ray's logical CPUs for every application at once: each replica reserves the profile's
    ``serve_num_cpus_per_replica`` (a reservation, not cores), and one to spare."""
    return int(sum(replicas) * float(profile["serve_num_cpus_per_replica"])) + 1


def run(profile: Profile, replicas: list[int], concurrency: list[int], *, input_len: int, output_len: int,
        repeats: int, prompts_per_stream: int, out_dir: Path, throughput_optimized: bool = True,
        direct_ingress: bool = False, start_timeout_s: float = 600) -> list[dict[str, Any]]:
    """Every application, measured in turns; returns the measured rows (``compare``'s shape)."""
    from ray import serve  # noqa: PLC0415

    from scripts.lab.cluster import LocalCluster  # noqa: PLC0415
    from scripts.lab.serve_state import DIRECT_INGRESS_ENV, ingress_urls  # noqa: PLC0415
    from scripts.serve.app import app_builder  # noqa: PLC0415
    from scripts.serve.config import fill_serve_repository, serve_repo_dir  # noqa: PLC0415
    from scripts.triton.repository.fill import repository_facts  # noqa: PLC0415

    check_counts(replicas)
    if direct_ingress and not throughput_optimized:
        raise ValueError("--direct-ingress needs RAY_SERVE_THROUGHPUT_OPTIMIZED: leave out --classic-proxy")
    fill_serve_repository(profile)
    repo = serve_repo_dir(profile)
    facts = repository_facts(repo)
    env = DIRECT_INGRESS_ENV if throughput_optimized else {}
    with ensemble_triton(repo, profile, start_timeout_s) as triton, \
            LocalCluster(num_cpus=logical_cpus(profile, replicas), serve_env=env) as cluster:
        targets = []
        for n in replicas:
            serve.run(app_builder({"profile": profile.name, "num_replicas": n, "triton_url": triton.grpc_url,
                                   "triton_model": "engine"}), name=f"r{n}", route_prefix=f"/r{n}")
            targets.append(Target(label(n), f"{cluster.base_url}/r{n}"))
        if direct_ingress:
            targets.append(Target(label(replicas[0], "direct ingress to one"), ingress_urls(f"r{replicas[0]}")[0]))
        print("applications running:", ", ".join(f"{t.label} at {t.base_url}" for t in targets), flush=True)
        runs = plan(targets, concurrency, served_model=profile["served_model_name"], tokenizer=facts.tokenizer_dir,
                    input_len=input_len, output_len=output_len, repeats=repeats, prompts_per_stream=prompts_per_stream)
        rows = measured(run_plan(runs, out_dir / "runs"))
        serve.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2], help="counts to compare; the first is the baseline")
    parser.add_argument("--classic-proxy", action="store_true", help="without RAY_SERVE_THROUGHPUT_OPTIMIZED")
    parser.add_argument("--direct-ingress", action="store_true", help="also the first count's first replica on its own port")
    parser.add_argument("--out", type=Path, default=None, help="default: build/results/bench/serve-replicas-<profile>")
    args = parser.parse_args(argv)
    try:
        check_counts(args.replicas)
    except ValueError as exc:
        parser.error(str(exc))
    profile = load_profile(args.profile)
    out_dir = bench_out_dir(args.out, "serve-replicas", profile.name)
    try:
        rows = run(profile, args.replicas, args.concurrency, **load_settings(args), out_dir=out_dir,
                   throughput_optimized=not args.classic_proxy, direct_ingress=args.direct_ingress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(compare.side_by_side(rows, label(args.replicas[0]), out_dir))
    return 1 if sum(int(r.get("failed", 0)) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
