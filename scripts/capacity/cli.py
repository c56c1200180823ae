"""The command line of the capacity checker (``python -m scripts.capacity``, ``tutorial-capacity``).

::

    python -m scripts.capacity --serve-config serve.yaml --cluster cluster.yaml
    python -m scripts.capacity --serve-config serve.yaml --live
    python -m scripts.capacity --serve-config serve.yaml --keys-only   # no cluster: old keys only
    python -m scripts.capacity --engine-config build/engine/trtllm --model-config config.json \\
        --instance-count 4 --gpu-memory 80GiB

Exit status: 0 when everything fits, 1 when something cannot fit or the Serve config has a key Ray 2.60
rejects or drops (``target_num_ongoing_requests_per_replica``, ...: :mod:`~scripts.capacity.keycheck`),
2 for malformed input (a one-line ``error: ...`` on stderr, after any such keys on stdout).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from scripts.capacity.check import check_capacity
from scripts.capacity.cluster import Cluster, cluster_from_ray, parse_cluster
from scripts.capacity.instance_memory import KV_CACHE_FREE_GPU_MEM_FRACTION, triton_instance_memory
from scripts.capacity.keycheck import deprecated_key_notes, format_key_report, serve_key_findings, upgrade_serve_keys
from scripts.capacity.spec import parse_serve_config
from scripts.capacity.units import CapacityConfigError, require_mapping


def _load_file(path: str | Path, what: str) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CapacityConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CapacityConfigError(f"the {what} {path} is not valid JSON: {exc}") from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise CapacityConfigError(f"the {what} {path} is not valid YAML{at}: {problem}") from None
    if data is None:
        raise CapacityConfigError(f"the {what} {path} is empty")
    return data


def load_cluster(path: str | Path) -> Cluster:
    """A cluster description file (YAML or JSON)."""
    return parse_cluster(_load_file(path, "cluster description"))


def _engine_and_model(engine_path: str, model_path: str | None) -> tuple[dict, dict]:
    path = Path(engine_path)
    if path.is_dir():
        path = path / "engine_config.json"
    engine = require_mapping(_load_file(path, "engine config"), f"engine config {path}")
    if model_path is None:
        model_dir = engine.get("model_dir")
        candidate = Path(model_dir) / "config.json" if isinstance(model_dir, str) else None
        if candidate is None or not candidate.is_file():
            raise CapacityConfigError("--model-config FILE is required (the model's config.json): the engine "
                                      "config names no model_dir holding one")
        model_path = str(candidate)
    mpath = Path(model_path)
    if mpath.is_dir():
        mpath = mpath / "config.json"
    model = require_mapping(_load_file(mpath, "model config"), f"model config {mpath}")
    return dict(engine), dict(model)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.capacity",
        description="Check Ray Serve deployments and Triton instance counts against the cluster before deploying. "
                    "Exit 0: everything fits; 1: something cannot fit; 2: malformed input.")
    parser.add_argument("--serve-config", metavar="FILE",
                        help="Serve config (serve build YAML, or a list of deployments)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", metavar="FILE",
                       help="cluster description: nodes: [{name, CPU, GPU, memory, resources}]")
    where.add_argument("--live", action="store_true", help="read the nodes of the running Ray cluster")
    where.add_argument("--keys-only", action="store_true",
                       help="only check the Serve config for keys Ray 2.60 rejects or drops (no cluster needed)")
    parser.add_argument("--address", default=None, help="Ray address for --live (default: auto)")
    parser.add_argument("--engine-config", metavar="FILE", help="engine_config.json (or its directory)")
    parser.add_argument("--model-config", metavar="FILE", help="the model's Hugging Face config.json")
    parser.add_argument("--num-parameters", type=int, default=None,
                        help="parameter count (default: from the model config)")
    parser.add_argument("--instance-count", type=int, default=1, help="Triton instance_group count (default 1)")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="memory of one GPU, e.g. 80GiB")
    parser.add_argument("--replicas-per-gpu", type=int, default=1, help="Serve replicas sharing one GPU (default 1)")
    parser.add_argument("--kv-cache-free-gpu-mem-fraction", type=float, default=None, metavar="F",
                        help="TensorRT-LLM, transformers: share of the free GPU memory each instance's KV cache takes "
                             f"(default: the engine config's, else {KV_CACHE_FREE_GPU_MEM_FRACTION}, TensorRT-LLM's)")
    parser.add_argument("--parallel-loading", action="store_true",
                        help="the instances start together (Triton's Python backend): give the worst case too "
                             "(vLLM: more than one instance starves the others' KV cache)")
    args = parser.parse_args(argv)

    key_findings: list = []
    try:
        if not args.serve_config and not args.engine_config:
            raise CapacityConfigError("nothing to check: give --serve-config FILE and/or --engine-config FILE")
        if args.keys_only and not args.serve_config:
            raise CapacityConfigError("--keys-only needs --serve-config FILE")
        reports = []
        if args.serve_config:
            if not args.cluster and not args.live and not args.keys_only:
                raise CapacityConfigError("--serve-config needs the cluster: --cluster FILE or --live "
                                          "(or --keys-only to check only its keys)")
            serve = _load_file(args.serve_config, "Serve config")
            key_findings = serve_key_findings(serve)
            if args.keys_only:
                print(format_key_report(key_findings, deprecated_key_notes(serve)))
                return 1 if key_findings else 0
            parse_serve_config(upgrade_serve_keys(serve))  # malformed input fails before connecting to Ray
            cluster = cluster_from_ray(args.address) if args.live else load_cluster(args.cluster)
            reports.append(check_capacity(serve, cluster))
        if args.engine_config:
            if not args.gpu_memory:
                raise CapacityConfigError("--engine-config needs --gpu-memory SIZE (e.g. 80GiB)")
            engine, model = _engine_and_model(args.engine_config, args.model_config)
            reports.append(triton_instance_memory(
                engine, args.instance_count, args.gpu_memory, model,
                num_parameters=args.num_parameters, replicas_per_gpu=args.replicas_per_gpu,
                kv_cache_free_gpu_mem_fraction=args.kv_cache_free_gpu_mem_fraction,
                parallel_loading=args.parallel_loading))
    except CapacityConfigError as exc:
        if key_findings:  # the keys Ray 2.60 does not take are the first thing to fix: say so anyway
            print(format_key_report(key_findings))
        print("error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 2
    print("\n\n".join(r.format_report() for r in reports))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
