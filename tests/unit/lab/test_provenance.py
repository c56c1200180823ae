"""Where an executed copy came from: the checkout's commit (git, or $TUTORIAL_COMMIT where there is no
.git) and the GPUs nvidia-smi lists."""
import subprocess
import sys

import pytest

from scripts.lab import provenance


def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q")
    (root / "tracked.txt").write_text("one\n")
    git(root, "add", "tracked.txt")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "first")
    return root


def head(root):
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_git_checkout_gives_its_head_and_whether_a_tracked_file_changed(repo):
    assert provenance.git_state(repo) == (head(repo), False)
    (repo / "untracked.txt").write_text("new\n")  # untracked files do not count
    assert provenance.git_state(repo) == (head(repo), False)
    (repo / "tracked.txt").write_text("two\n")
    assert provenance.git_state(repo) == (head(repo), True)
    git(repo, "add", "tracked.txt")  # staged is still uncommitted
    assert provenance.git_state(repo) == (head(repo), True)


def test_a_folder_without_its_own_git_is_not_a_checkout(repo, tmp_path):
    inner = repo / "work" / "src"  # gpu_host.sh's copy under some other repository: not that repository's state
    inner.mkdir(parents=True)
    assert provenance.git_state(inner) is None
    assert provenance.git_state(tmp_path / "nowhere") is None
    (tmp_path / "plain").mkdir()
    assert provenance.git_state(tmp_path / "plain") is None


def test_without_git_the_commit_comes_from_the_environment(tmp_path):
    plain = tmp_path / "src"
    plain.mkdir()
    assert provenance.commit_record(plain, {}) == {"commit": None, "commit_from": None, "dirty": None}
    given = {"TUTORIAL_COMMIT": "a" * 40}
    assert provenance.commit_record(plain, given) == {"commit": "a" * 40, "commit_from": "TUTORIAL_COMMIT",
                                                      "dirty": None}
    assert provenance.commit_record(plain, given | {"TUTORIAL_DIRTY": "0"})["dirty"] is False
    assert provenance.commit_record(plain, given | {"TUTORIAL_DIRTY": "1"})["dirty"] is True
    with pytest.raises(SystemExit, match="TUTORIAL_DIRTY='maybe'"):
        provenance.commit_record(plain, given | {"TUTORIAL_DIRTY": "maybe"})


def test_git_wins_and_a_contradicting_environment_is_an_error(repo):
    sha = head(repo)
    assert provenance.commit_record(repo, {}) == {"commit": sha, "commit_from": "git", "dirty": False}
    # the same commit (or its short form) given from outside agrees; TUTORIAL_DIRTY does not override git
    assert provenance.commit_record(repo, {"TUTORIAL_COMMIT": sha[:7], "TUTORIAL_DIRTY": "1"})["dirty"] is False
    with pytest.raises(SystemExit, match=f"is at {sha}"):
        provenance.commit_record(repo, {"TUTORIAL_COMMIT": "0" * 40})


def test_gpus_are_nvidia_smis_lines_or_none(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("import sys\nprint('NVIDIA H100 80GB HBM3, 81559 MiB\\nNVIDIA H100 80GB HBM3, 81559 MiB\\n')\n"
                    "sys.exit(int(sys.argv[1]))\n")
    assert provenance.gpu_models((sys.executable, str(fake), "0")) == ["NVIDIA H100 80GB HBM3, 81559 MiB"] * 2
    assert provenance.gpu_models((sys.executable, str(fake), "9")) is None  # nvidia-smi without a driver fails
    assert provenance.gpu_models((str(tmp_path / "no-such-command"),)) is None


def test_the_record_holds_commit_profile_and_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "gpu_models", lambda: None)
    assert provenance.provenance("gpu-vllm", tmp_path, {"TUTORIAL_COMMIT": "b" * 40, "TUTORIAL_DIRTY": "0"}) == {
        "commit": "b" * 40, "commit_from": "TUTORIAL_COMMIT", "dirty": False, "profile": "gpu-vllm", "gpu": None}
