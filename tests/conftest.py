import pytest


def pytest_configure(config):
    # Ray Serve's own models still use pydantic v1-style Field arguments; the deprecation warnings
    # they raise at import are Ray's to fix, and they would bury this suite's own warnings.
    config.addinivalue_line("filterwarnings", r"ignore::DeprecationWarning:ray\..*")


@pytest.fixture
def build_root(tmp_path, monkeypatch):
    """An empty build directory for one test (TUTORIAL_BUILD_DIR points at it)."""
    root = tmp_path / "build"
    root.mkdir()
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(root))
    return root
