"""The README's default application against ``vllm serve`` of the same engine, side by side in one run.

    python -m scripts.bench.readme_app --profile gpu-vllm --concurrency 1 32 256 --input-len 128 --output-len 128

What a reader deploys from the README (``serve run scripts.serve.app:app_builder profile=P`` with
``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: one replica that starts its own Triton and calls the profile's
Triton model, reached through Ray's proxy) and ``vllm serve`` with the engine's own settings, measured in
turns by ``vllm bench serve`` on the chat route and the completions route (``scripts.bench.sweep.plan``
interleaves them), then the ratios against ``vllm serve`` on each route. This is the question of the
README's "what does Serve in front of Triton cost": the same engine, the same prompts, the same machine.

``vllm serve`` starts first and is ready before the application deploys: on one GPU, vLLM measures the
free memory as an engine starts, so two engines starting at once would each count the other's.
Needs the engine built and the model made (notebooks 00-01); the Serve repository is filled here.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.bench import compare
from scripts.bench.sweep import Target, bench_out_dir, bench_parser, load_settings, measured, plan
from scripts.bench.vllm_bench import run_plan
from scripts.profiles import Profile, load_profile

#: The labels of the table; ``vllm serve`` on the same route is each route's baseline.
PEER, APP = "vllm serve", "README app"
ROUTES = ("chat", "completions")


def label(who: str, route: str) -> str:
    return f"{who}, {route}"


def check_routes(routes: list[str]) -> list[str]:
    """The routes to measure: chat and/or completions, each once."""
    if not routes or any(r not in ROUTES for r in routes) or len(set(routes)) != len(routes):
        raise ValueError(f"routes must be some of {list(ROUTES)}, each once, got {routes}")
    return routes


def ratio_rows(rows: list[dict[str, Any]], routes: list[str]) -> list[dict[str, Any]]:
    """The application's ratios against ``vllm serve`` on the same route (``compare.ratios`` per route)."""
    out = []
    for route in routes:
        agg = compare.aggregate([r for r in rows if r["label"] in (label(PEER, route), label(APP, route))])
        out += [r for r in compare.ratios(agg, label(PEER, route)) if r["label"] == label(APP, route)]
    return out


def run(profile: Profile, concurrency: list[int], routes: list[str], *, input_len: int, output_len: int,
        repeats: int, prompts_per_stream: int, out_dir: Path, start_timeout_s: float = 600) -> list[dict[str, Any]]:
    """Both servers started, every run of the plan measured in turns; returns the measured rows."""
    from ray import serve  # noqa: PLC0415

    from scripts.bench.serve_replicas import logical_cpus  # noqa: PLC0415
    from scripts.bench.vllm_server import VllmServer  # noqa: PLC0415
    from scripts.lab.cluster import LocalCluster  # noqa: PLC0415
    from scripts.lab.serve_state import DIRECT_INGRESS_ENV  # noqa: PLC0415
    from scripts.serve.app import app_builder  # noqa: PLC0415
    from scripts.serve.config import fill_serve_repository, serve_repo_dir  # noqa: PLC0415
    from scripts.triton.repository.fill import repository_facts  # noqa: PLC0415

    check_routes(routes)
    fill_serve_repository(profile)
    facts = repository_facts(serve_repo_dir(profile))
    vllm = VllmServer.from_profile(profile, profile.path("engine_dir"))
    try:
        vllm.start(timeout_s=start_timeout_s)
        print(f"{PEER} ready after {vllm.startup_s:.0f} s at {vllm.url}", flush=True)
        # The README's settings: Ray's throughput-optimized path, exported before Ray starts.
        with LocalCluster(num_cpus=logical_cpus(profile, [1]), serve_env=DIRECT_INGRESS_ENV) as cluster:
            serve.run(app_builder({"profile": profile.name}), name="default", route_prefix="/")
            print(f"{APP} running at {cluster.base_url} (its replica's own Triton, calling "
                  f"{profile['serve_triton_model']!r})", flush=True)
            targets = [Target(label(who, route), url, route) for route in routes
                       for who, url in ((PEER, vllm.url), (APP, cluster.base_url))]
            runs = plan(targets, concurrency, served_model=profile["served_model_name"], tokenizer=facts.tokenizer_dir,
                        input_len=input_len, output_len=output_len, repeats=repeats, prompts_per_stream=prompts_per_stream)
            rows = measured(run_plan(runs, out_dir / "runs"))
            serve.shutdown()
    finally:
        vllm.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES), help="chat and/or completions")
    parser.add_argument("--out", type=Path, default=None, help="default: build/results/bench/readme-app-<profile>")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    out_dir = bench_out_dir(args.out, "readme-app", profile.name)
    try:
        rows = run(profile, args.concurrency, args.routes, **load_settings(args), out_dir=out_dir)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(compare.side_by_side(rows, None, out_dir, ratio_rows=ratio_rows(rows, args.routes)))
    return 1 if sum(int(r.get("failed", 0)) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
