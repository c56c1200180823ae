"""Throughput of Triton's ``generate_stream`` against vLLM offline, side by side in one run.

``python -m scripts.bench.triton --url http://127.0.0.1:PORT --engine_dir build/engine/vllm``
sends N concurrent ``generate_stream`` requests of T tokens each (``end_id`` -1: no early stop) to
the running server's ensemble, then runs the same prompts through vLLM's offline ``LLM.generate``
in a child process (``scripts.engine.vllm_offline``, the function ``run.py`` uses too; only the
``generate`` call is timed, not the engine's start-up), and prints both rates and their ratio.
Prints one JSON line last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from scripts.model.tiny_llama import corpus_lines
from scripts.paths import REPO_ROOT
from scripts.procs.process_guard import run_guarded


def bench_prompts(n: int) -> list[str]:
    """n prompts: the first words of the corpus sentences, cycled."""
    lines = corpus_lines()
    return [" ".join(lines[i % len(lines)].split()[:4]) for i in range(n)]


def stream_one(url: str, prompt: str, tokens: int, model: str) -> dict:
    body = {"text_input": prompt, "max_tokens": tokens, "end_id": -1, "stream": False}
    start = time.monotonic()
    with requests.post(f"{url}/v2/models/{model}/generate_stream", json=body, stream=True, timeout=300) as r:
        events = [line for line in r.iter_lines() if line.startswith(b"data:")]
    ok = r.status_code == 200 and events and "error" not in json.loads(events[-1][5:])
    return {"ok": bool(ok), "status": r.status_code, "seconds": time.monotonic() - start,
            "error": None if ok else (events[-1][5:].decode() if events else r.text)}


def bench_triton(url: str, prompts: list[str], tokens: int, model: str = "ensemble") -> dict:
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        results = list(pool.map(lambda p: stream_one(url, p, tokens, model), prompts))
    wall = time.monotonic() - start
    ok = sum(r["ok"] for r in results)
    return {"requests": len(prompts), "succeeded": ok, "wall_s": wall, "tok_per_s": ok * tokens / wall,
            "errors": [r["error"] for r in results if not r["ok"]][:3]}


def bench_offline(engine_dir: str, prompts: list[str], tokens: int, timeout_s: float = 600) -> dict:
    """The engine offline in a child process (vLLM must be created under a __main__ guard; a child
    also keeps a GPU engine's memory out of this process). The child has a process group of its own
    with the detached guard inside: its engine processes go too if this process is killed."""
    with tempfile.TemporaryDirectory(prefix="tutorial-offline-") as tmp:
        result, log = Path(tmp) / "offline.json", Path(tmp) / "offline.log"
        cmd = [sys.executable, "-m", "scripts.bench.triton", "--offline", "--engine_dir", engine_dir,
               "--tokens", str(tokens), "--requests", str(len(prompts)), "--output", str(result)]
        status = run_guarded(cmd, log, env=dict(os.environ), cwd=REPO_ROOT, grace_s=2, timeout_s=timeout_s)
        if status != 0 or not result.is_file():
            raise RuntimeError(f"offline engine run failed (status {status}):\n{log.read_text(errors='replace')[-2000:]}")
        return json.loads(result.read_text())


def offline_main(engine_dir: str, n: int, tokens: int) -> dict:
    """The child process: the engine offline on the same prompts (vLLM's ``LLM``, or transformers'
    continuous batching); the rate counts the generation only."""
    from scripts.engine.config import read_engine_config  # noqa: PLC0415 - the child process only

    config = read_engine_config(engine_dir)
    if config["engine"] == "transformers":
        from scripts.engine import transformers_cb  # noqa: PLC0415
        from scripts.model.tokenizer import load_tokenizer  # noqa: PLC0415

        tokenizer = load_tokenizer(config.get("tokenizer_dir") or config["model_dir"])
        ids = [tokenizer(p)["input_ids"] for p in bench_prompts(n)]
        run = transformers_cb.generate(config, ids, tokens, ignore_eos=True, warmup_prompts=2)
    else:
        from scripts.engine import vllm_offline  # noqa: PLC0415

        run = vllm_offline.generate(config, bench_prompts(n), tokens, ignore_eos=True, warmup_prompts=2)
    return {"requests": n, "engine": config["engine"], "wall_s": run.generate_s,
            "tok_per_s": run.generated_tokens / run.generate_s}


def triton_vs_offline(url: str, engine_dir: str, requests: int = 64, tokens: int = 32, *, model: str = "ensemble",
                      offline: bool = True) -> dict:
    """Triton's rate on ``requests`` concurrent streams, then (``offline``) the engine's own rate on
    the same prompts, and their ratio; prints each as it is measured. ``offline`` needs the engine
    in this environment (vLLM on cpu); without it the result has Triton's side only."""
    prompts = bench_prompts(requests)
    bench_triton(url, prompts[:4], tokens, model)  # warm-up
    triton = bench_triton(url, prompts, tokens, model)
    print(f"Triton generate_stream: {triton['succeeded']}/{triton['requests']} ok, {triton['tok_per_s']:.0f} output tok/s",
          flush=True)
    if not offline:
        return {"triton": triton, "offline": None, "ratio": None}
    result = bench_offline(str(engine_dir), prompts, tokens)
    ratio = triton["tok_per_s"] / result["tok_per_s"]
    print(f"{result.get('engine', 'engine')} offline: {result['requests']} prompts, {result['tok_per_s']:.0f} output tok/s")
    print(f"ratio Triton / offline: {ratio:.2f}")
    return {"triton": triton, "offline": result, "ratio": ratio}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="Triton HTTP URL (http://127.0.0.1:PORT)")
    p.add_argument("--engine_dir", required=True)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--model", default="ensemble")
    p.add_argument("--offline", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--output", type=Path, help=argparse.SUPPRESS)  # --offline: where the result goes
    args = p.parse_args(argv)
    if args.offline:
        args.output.write_text(json.dumps(offline_main(args.engine_dir, args.requests, args.tokens)))
        return 0
    if not args.url:
        p.error("--url is required")
    result = triton_vs_offline(args.url, args.engine_dir, args.requests, args.tokens, model=args.model)
    print(json.dumps(result))
    return 0 if result["triton"]["succeeded"] == result["triton"]["requests"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
