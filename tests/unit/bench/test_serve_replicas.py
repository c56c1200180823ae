"""The replica-count comparison: counts checked, Ray's logical CPUs for every application at once, and a
missing engine named with the step to take."""
import pytest

from scripts.bench import serve_replicas as sr
from scripts.profiles import load_profile


def test_labels_and_the_cpus_every_application_reserves():
    profile = load_profile("cpu")
    assert sr.label(1) == "1 replica, proxy" and sr.label(4) == "4 replicas, proxy"
    per_replica = float(profile["serve_num_cpus_per_replica"])
    assert sr.logical_cpus(profile, [1, 2, 4]) == int(7 * per_replica) + 1
    assert sr.logical_cpus(load_profile("gpu-trtllm"), [1, 2]) == int(3 * float(load_profile("gpu-trtllm")["serve_num_cpus_per_replica"])) + 1


@pytest.mark.parametrize("counts", [[], [0, 1], [1, 1], [2, True], [1.5]])
def test_counts_must_be_whole_distinct_and_positive(counts):
    with pytest.raises(ValueError, match="replica counts"):
        sr.check_counts(counts)


def test_the_command_line_refuses_bad_counts_and_a_direct_ingress_without_its_switch(build_root, capsys):
    with pytest.raises(SystemExit) as info:
        sr.main(["--replicas", "2", "2"])
    assert info.value.code == 2 and "must differ" in capsys.readouterr().err
    with pytest.raises(ValueError, match="leave out --classic-proxy"):
        sr.run(load_profile("cpu"), [1], [8], input_len=8, output_len=8, repeats=1, prompts_per_stream=1,
               out_dir=build_root, throughput_optimized=False, direct_ingress=True)


def test_a_profile_without_an_engine_stops_with_the_step_to_take(build_root, capsys):
    assert sr.main(["--profile", "cpu", "--out", str(build_root / "out")]) == 2
    assert "build the engine first" in capsys.readouterr().err
