"""scripts.bench.sweep: the targets of a benchmark, and the interleaved runs of its plan."""
from __future__ import annotations

import pytest

from scripts.bench import sweep
from scripts.bench.sweep import Target, bench_parser, load_settings, plan, prompts_for

VLLM = Target("vllm", "http://127.0.0.1:8001/")
SERVE = Target("serve", "http://127.0.0.1:8000", kind="chat")
ENSEMBLE = Target("triton", "http://127.0.0.1:8002", kind="triton-ensemble")
STANDALONE = Target("triton-vllm", "http://127.0.0.1:8002", kind="triton-vllm_model")
COMMON = {"served_model": "tiny-llama", "tokenizer": "build/models/tiny-llama", "input_len": 32, "output_len": 16,
          "warmup_prompts": 0}


def test_prompts_for_keeps_every_stream_busy_with_a_floor():
    assert prompts_for(1, 4) == 8  # the floor
    assert prompts_for(2, 4) == 8
    assert prompts_for(32, 4) == 128
    assert prompts_for(1, 4, min_prompts=1) == 4
    for bad in ((0, 4), (1, 0), (-1, 4)):
        with pytest.raises(ValueError, match="at least 1"):
            prompts_for(*bad)


def test_a_target_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match=r"target 'x': kind must be one of .*'chat'.*got 'grpc'"):
        Target("x", "http://h", kind="grpc")
    assert Target("x", "http://h").kind == "completions"


def test_runs_interleave_repeat_then_concurrency_then_target():
    runs = plan([VLLM, SERVE], [4, 1], repeats=2, **COMMON)
    order = [(r["repeat"], r["concurrency"], r["label"]) for r in runs]
    assert order == [(0, 1, "vllm"), (0, 1, "serve"), (0, 4, "vllm"), (0, 4, "serve"),
                     (1, 1, "vllm"), (1, 1, "serve"), (1, 4, "vllm"), (1, 4, "serve")]
    assert [r["num_prompts"] for r in runs[:4]] == [8, 8, 16, 16]
    assert all(r["seed"] == 0 and r["input_len"] == 32 and r["output_len"] == 16 for r in runs)


def test_a_plan_opens_with_one_warm_up_run_per_target_that_measured_drops():
    runs = plan([VLLM, SERVE], [4, 2], **(COMMON | {"warmup_prompts": 3}))
    order = [(r["repeat"], r["concurrency"], r["label"], r["num_prompts"]) for r in runs]
    assert order == [(-1, 1, "vllm", 3), (-1, 1, "serve", 3),
                     (0, 2, "vllm", 8), (0, 2, "serve", 8), (0, 4, "vllm", 16), (0, 4, "serve", 16)]
    assert sweep.measured(runs) == runs[2:]
    assert sweep.measured([{"label": "x"}]) == [{"label": "x"}]  # a row without a repeat is measured
    assert [r["repeat"] for r in plan([VLLM], [1], **COMMON)] == [0]  # 0 warm-up prompts: none


def test_smoke_settings_keep_the_two_lowest_concurrencies_up_to_8():
    assert sweep.smoke_settings([16, 1, 4, 4], 3, 8, smoke=False) == ([1, 4, 16], 3, 8)
    assert sweep.smoke_settings([16, 1, 4, 2], 3, 8, smoke=True) == ([1, 2], 1, 2)
    assert sweep.smoke_settings([16, 32], 3, 1, smoke=True) == ([16], 1, 1)
    with pytest.raises(ValueError, match="CONCURRENCY"):
        sweep.smoke_settings([0, 1], 1, 1, smoke=False)
    with pytest.raises(ValueError, match="REPEATS and PROMPTS_PER_STREAM"):
        sweep.smoke_settings([1], 0, 1, smoke=False)


def test_each_kind_gets_its_endpoint_backend_and_model():
    runs = {r["label"]: r for r in plan([VLLM, SERVE, ENSEMBLE, STANDALONE, Target("own", "http://h", model="m")],
                                        [1], seed=7, **COMMON)}
    got = {label: (r["endpoint"], r["backend"], r["model"]) for label, r in runs.items()}
    assert got == {
        "vllm": ("/v1/completions", "openai", "tiny-llama"),
        "serve": ("/v1/chat/completions", "openai-chat", "tiny-llama"),
        "triton": ("/v2/models/ensemble/generate_stream", "triton-ensemble", "ensemble"),  # from the endpoint
        "triton-vllm": ("/v2/models/vllm_model/generate_stream", "triton-vllm_model", "vllm_model"),
        "own": ("/v1/completions", "openai", "m"),  # a target's own model wins
    }
    assert runs["vllm"]["base_url"] == "http://127.0.0.1:8001"  # trailing slash dropped
    assert all(r["tokenizer"] == "build/models/tiny-llama" and r["seed"] == 7 and r["temperature"] == 0.0
               for r in runs.values())
    assert set(sweep.KINDS) == {"completions", "chat", "triton-ensemble", "triton-vllm_model"}


def test_concurrencies_are_deduplicated_and_sorted():
    runs = plan([VLLM], [8, 1, "2", 8, 1], **COMMON)
    assert [r["concurrency"] for r in runs] == [1, 2, 8]
    assert all(isinstance(r["concurrency"], int) for r in runs)


def test_duplicate_labels_are_refused():
    with pytest.raises(ValueError, match="target labels must differ"):
        plan([VLLM, Target("vllm", "http://other")], [1], **COMMON)


@pytest.mark.parametrize("targets, concurrencies, repeats", [([], [1], 1), ([VLLM], [], 1), ([VLLM], [1], 0)])
def test_an_empty_plan_is_refused(targets, concurrencies, repeats):
    with pytest.raises(ValueError, match="at least one target, one concurrency and one repeat"):
        plan(targets, concurrencies, repeats=repeats, **COMMON)


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        plan([VLLM], [0, 1], **COMMON)
    with pytest.raises(ValueError, match="at least 1"):
        plan([VLLM], [1], prompts_per_stream=0, **COMMON)
    with pytest.raises(ValueError, match="output_len must be at least 1"):
        plan([VLLM], [1], **(COMMON | {"output_len": 0}))
    with pytest.raises(ValueError, match="input_len must be at least 1"):
        plan([VLLM], [1], **(COMMON | {"input_len": 0}))


def test_stream_interval_body():
    from scripts.bench.sweep import stream_interval_body

    assert stream_interval_body(1) is None and stream_interval_body(4) == {"stream_interval": 4}
    for bad in (0, 1025, 2.0, True):
        with pytest.raises(ValueError, match="STREAM_INTERVAL must be an integer from 1 to 1024"):
            stream_interval_body(bad)
    run = plan([Target("a", "http://x")], [1], served_model="m", tokenizer="t", input_len=4, output_len=4,
               extra_body=stream_interval_body(4))[-1]
    from scripts.bench.vllm_bench import bench_args
    assert bench_args(run)[-2:] == ["--extra-body", '{"stream_interval": 4}']


def test_a_benchs_load_options_become_its_run_settings():
    parser = bench_parser("A bench.\n\nMore words.")
    args = parser.parse_args(["--concurrency", "1", "256", "--input-len", "1024", "--repeats", "1"])
    assert parser.description == "A bench." and args.profile == "cpu" and args.concurrency == [1, 256]
    assert load_settings(args) == {"input_len": 1024, "output_len": 32, "repeats": 1, "prompts_per_stream": 4}


class _Triton:
    made: list = []

    def __init__(self, repo, extra_args=()):
        self.repo, self.extra_args, self.stopped = repo, extra_args, False
        _Triton.made.append(self)

    def start(self, timeout_s):
        if "broken" in str(self.repo):
            raise TimeoutError("not ready")

    def stop(self):
        self.stopped = True


def test_a_benchs_triton_loads_the_ensemble_and_is_stopped_after_the_block_and_after_a_failed_start(monkeypatch, capsys):
    import scripts.triton.server as server
    from scripts.profiles import load_profile

    monkeypatch.setattr(server, "TritonServer", _Triton)
    with sweep.ensemble_triton("repo", load_profile("cpu"), 5, "count 2") as triton:
        assert not triton.stopped and triton.extra_args[:2] == ("--model-control-mode=explicit", "--load-model=ensemble")
    assert triton.stopped and "count 2: Triton ready after" in capsys.readouterr().out
    with pytest.raises(TimeoutError):
        with sweep.ensemble_triton("broken", load_profile("cpu")):
            pass
    assert _Triton.made[-1].stopped
