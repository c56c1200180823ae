"""Under ``make test-contract``: the tests beside the unit tests named in env/contract/gpu-trtllm.txt
run with the NGC image's package versions, not this venv's (the runner checks it too, before)."""
import os

import pytest

from scripts.lab.contract import CONTRACT_ENV, read_contract

pytestmark = pytest.mark.skipif(os.environ.get(CONTRACT_ENV) != "gpu-trtllm",
                                reason="runs under `make test-contract` (python -m scripts.lab.contract gpu-trtllm)")


def test_the_images_versions_are_the_ones_imported():
    import huggingface_hub
    import tokenizers
    import transformers

    pins = read_contract("gpu-trtllm").pins
    assert transformers.__version__ == pins["transformers"]
    assert tokenizers.__version__ == pins["tokenizers"]
    assert huggingface_hub.__version__ == pins["huggingface_hub"]


def test_the_tiny_checkpoint_loads_in_the_images_transformers(tmp_path):
    """Notebook 00's sanity check (greedy_hf) on a checkpoint written and read by transformers 4.47."""
    from scripts.model.tiny_llama import TinyLlamaSpec, greedy_hf, make_tiny_llama

    made = make_tiny_llama(tmp_path / "tiny", TinyLlamaSpec(train_steps=2))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(made["files"])
    text = greedy_hf(made["model_dir"], "The", max_new_tokens=4)  # from_pretrained with 4.47's dtype keyword
    assert isinstance(text, str)
