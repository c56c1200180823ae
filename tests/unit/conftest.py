import os
import shutil
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
    from filelock import FileLock  # noqa: PLC0415
    from scripts.model.tiny_llama import TinyLlamaSpec, make_tiny_llama  # noqa: PLC0415 - torch, transformers

    # Under pytest-xdist (make test-unit) each worker has a session of its own: the first one trains
    # the model into the folder the workers share, the others wait for it and read it.
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out, complete = root / "tiny-llama", root / "tiny-llama.complete"
    with FileLock(f"{out}.lock"):
        if not complete.is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            make_tiny_llama(out, TinyLlamaSpec())
            complete.touch()
    return out


@pytest.fixture
def chat_service():
    """The Serve application's service over a fake Triton, with room for the chat data's questions."""
    from fakes import long_service  # noqa: PLC0415

    return long_service()


@pytest.fixture
def chat_url(chat_service):
    """The routes over ``chat_service`` on a loopback port: the URL chat clients and loads are sent to."""
    from fakes import serving  # noqa: PLC0415

    with serving(chat_service) as url:
        yield url
