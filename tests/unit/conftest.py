import sys
from pathlib import Path

import pytest

# The unit tests live in one folder per package; their shared fakes are one module here
# (`from fakes import ...`), which a test in a subfolder finds only with this folder on sys.path.
UNIT_DIR = str(Path(__file__).resolve().parent)
if UNIT_DIR not in sys.path:
    sys.path.insert(0, UNIT_DIR)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """The cpu profile's tiny Llama, what notebook 00 makes (``prepare_model`` of an ``embedded`` model),
    trained once for the session: the tests that serve it copy it (``fakes.install_model``) instead of
    training it again (about 10 s of a core each time; ``tests/unit/model`` tests the training itself)."""
    from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama  # noqa: PLC0415 - torch, transformers

    out = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_llama(out, TinyLlamaSpec())
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report names every tritonserver of this session that crashed (its signal and
    log tail), once each: a crash shows up in a test as "connection refused", which says nothing."""
    outcome = yield
    report = outcome.get_result()
    server_module = sys.modules.get("scripts.triton.server")
    if not report.failed or server_module is None:
        return
    for server in list(server_module.TritonServer.started):
        if server.crashed() and id(server.process) not in _REPORTED_CRASHES:
            _REPORTED_CRASHES.add(id(server.process))
            report.sections.append(("tritonserver crashed", server.crash_report()))


_REPORTED_CRASHES: set[int] = set()
