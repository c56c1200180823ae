"""The coalesce_chunks comparison: two applications that differ in that setting alone, set against off."""
from scripts.bench import serve_coalesce as sc
from scripts.profiles import load_profile


def test_the_two_applications_differ_in_coalesce_chunks_alone_and_off_is_the_baseline():
    assert sorted(sc.VARIANTS.values()) == [False, True]
    assert sc.label(False) == "coalesce_chunks off" and sc.label(True) == "coalesce_chunks on"
    assert load_profile("cpu")["serve_coalesce_chunks"] is True  # the default the bench measures against off


def test_a_profile_without_a_serve_repository_stops_with_the_step_to_take(build_root, capsys):
    assert sc.main(["--profile", "cpu", "--out", str(build_root / "out")]) == 2
    assert "notebook" in capsys.readouterr().err
