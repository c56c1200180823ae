from scripts.lab.progress import OneLine


def test_one_line_logs_every_line_and_prints_once_outside_ipython(tmp_path, capsys):
    marks = []
    progress = OneLine(3, tmp_path / "phase" / "progress.log", then=lambda: marks.append(1))
    for i in range(3):
        progress(f"target  c=1   repeat={i}   100.0 tok/s\n")
    assert (tmp_path / "phase" / "progress.log").read_text().splitlines() == [
        f"target  c=1   repeat={i}   100.0 tok/s" for i in range(3)]
    assert len(marks) == 3
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("3/3 runs done; the last: target c=1 repeat=2 100.0 tok/s")
