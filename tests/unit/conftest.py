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

