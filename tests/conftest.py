import pytest


@pytest.fixture
def build_root(tmp_path, monkeypatch):
    """An empty build directory for one test (TUTORIAL_BUILD_DIR points at it)."""
    root = tmp_path / "build"
    root.mkdir()
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(root))
    return root
