"""The README app against `vllm serve`: the routes checked, each route's ratios taken against `vllm serve`
on that route (never across routes), and a missing engine named with the step to take."""
import pytest

from scripts.bench import readme_app as ra


def row(who, route, concurrency, tok_s, ttft, itl, repeat=0):
    return {"label": ra.label(who, route), "concurrency": concurrency, "repeat": repeat, "completed": 8, "failed": 0,
            "output_throughput": tok_s, "median_ttft_ms": ttft, "median_itl_ms": itl, "median_e2el_ms": ttft + 31 * itl,
            "p99_itl_ms": itl}


@pytest.mark.parametrize("routes", [[], ["chat", "chat"], ["completion"], ["chat", "generate"]])
def test_routes_are_chat_or_completions_each_once(routes):
    with pytest.raises(ValueError, match="routes must be some of"):
        ra.check_routes(routes)


def test_each_route_is_measured_against_vllm_serve_on_the_same_route():
    rows = [row(ra.PEER, "chat", 32, 1000.0, 100.0, 4.0), row(ra.APP, "chat", 32, 800.0, 130.0, 5.0),
            row(ra.PEER, "completions", 32, 2000.0, 50.0, 2.0), row(ra.APP, "completions", 32, 1000.0, 60.0, 3.0)]
    ratios = {r["label"]: r for r in ra.ratio_rows(rows, ["chat", "completions"])}
    assert set(ratios) == {ra.label(ra.APP, "chat"), ra.label(ra.APP, "completions")}
    assert ratios[ra.label(ra.APP, "chat")]["throughput_ratio"] == pytest.approx(0.8)
    assert ratios[ra.label(ra.APP, "chat")]["ttft_p50_delta_ms"] == pytest.approx(30.0)
    assert ratios[ra.label(ra.APP, "completions")]["throughput_ratio"] == pytest.approx(0.5)
    assert ratios[ra.label(ra.APP, "completions")]["overhead_per_token_ms"] == pytest.approx(1.0)


def test_the_command_line_refuses_an_unknown_route_and_a_route_named_twice(build_root, capsys):
    with pytest.raises(SystemExit) as info:
        ra.main(["--routes", "chat", "embeddings"])
    assert info.value.code == 2 and "invalid choice: 'embeddings'" in capsys.readouterr().err
    assert ra.main(["--routes", "chat", "chat", "--out", str(build_root / "out")]) == 2
    assert "routes must be some of" in capsys.readouterr().err


def test_a_profile_without_an_engine_stops_with_the_step_to_take(build_root, capsys):
    assert ra.main(["--profile", "cpu", "--out", str(build_root / "out")]) == 2
    assert "build the engine first" in capsys.readouterr().err
