"""scripts.bench.triton.triton_vs_offline: Triton's side, then the engine offline on the same prompts."""
from scripts.bench import triton as bench


def test_triton_vs_offline_measures_both_on_the_same_prompts_and_divides(monkeypatch, capsys):
    seen = {}

    def fake_triton(url, prompts, tokens, model):
        seen.setdefault("triton", []).append(list(prompts))
        return {"requests": len(prompts), "succeeded": len(prompts), "tok_per_s": 300.0}

    def fake_offline(engine_dir, prompts, tokens):
        seen["offline"] = list(prompts)
        return {"requests": len(prompts), "tok_per_s": 1200.0}

    monkeypatch.setattr(bench, "bench_triton", fake_triton)
    monkeypatch.setattr(bench, "bench_offline", fake_offline)
    result = bench.triton_vs_offline("http://127.0.0.1:1", "engine", requests=6, tokens=8)
    assert result["ratio"] == 0.25 and result["triton"]["succeeded"] == 6
    assert seen["triton"][1] == seen["offline"] == bench.bench_prompts(6)  # after a 4-prompt warm-up
    assert len(seen["triton"][0]) == 4
    assert "ratio Triton / offline: 0.25" in capsys.readouterr().out


def test_triton_vs_offline_without_an_offline_engine_reports_triton_only(monkeypatch):
    monkeypatch.setattr(bench, "bench_triton", lambda *a: {"requests": 2, "succeeded": 2, "tok_per_s": 10.0})
    monkeypatch.setattr(bench, "bench_offline", lambda *a: (_ for _ in ()).throw(AssertionError("not called")))
    assert bench.triton_vs_offline("u", "e", requests=2, offline=False) == {
        "triton": {"requests": 2, "succeeded": 2, "tok_per_s": 10.0}, "offline": None, "ratio": None}
