"""scripts.generated: committed files generated from the profiles, written or checked."""
from scripts.generated import sync


def test_sync_writes_then_check_passes_and_notices_an_edit(tmp_path, capsys):
    files = {tmp_path / "a" / "one.yaml": "x: 1\n", tmp_path / "two.yaml": "y: 2\n"}
    assert sync(files, check=True, command="regen") == 1  # nothing written yet
    assert sync(files, check=False, command="regen") == 0
    assert all(path.read_text() == text for path, text in files.items())
    assert sync(files, check=True, command="regen") == 0
    (tmp_path / "two.yaml").write_text("y: 3\n")
    capsys.readouterr()
    assert sync(files, check=True, command="regen") == 1
    out = capsys.readouterr().out
    assert "two.yaml" in out and "one.yaml" not in out and "(regen)" in out
    assert (tmp_path / "two.yaml").read_text() == "y: 3\n"  # check writes nothing
