"""scripts.model.tokenizer: the tokenizer AutoTokenizer gives, without torch for the tutorial's Llamas."""
import json
import shutil
import subprocess
import sys

import pytest
from transformers import AutoTokenizer
from transformers.models.auto import tokenization_auto

from scripts.model.tokenizer import GENERIC_CLASS, GENERIC_MODEL_TYPES, is_generic, load_tokenizer
from scripts.paths import REPO_ROOT

TEXTS = ["Triton batches it.", "Café 😀 <|user|>", ""]


def edited(source, target, file, **changes):
    shutil.copytree(source, target)
    data = json.loads((target / file).read_text())
    data.update(changes)
    (target / file).write_text(json.dumps(data))
    return target


def test_the_tiny_llama_gets_autotokenizers_class_and_answers(tiny_llama):
    assert is_generic(tiny_llama)
    ours, auto = load_tokenizer(tiny_llama), AutoTokenizer.from_pretrained(tiny_llama)
    assert type(ours) is type(auto) and type(ours).__name__ == GENERIC_CLASS
    assert ours(TEXTS)["input_ids"] == auto(TEXTS)["input_ids"]
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (auto.bos_token_id, auto.eos_token_id, auto.pad_token_id)
    chat = [{"role": "user", "content": "Hi"}]
    assert ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        auto.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    ids = auto("Ray Serve takes")["input_ids"]
    assert ours.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True)


def test_loading_the_tiny_llamas_tokenizer_imports_no_torch(tiny_llama):
    probe = ("import sys; from scripts.model.tokenizer import load_tokenizer; "
             f"load_tokenizer({str(tiny_llama)!r}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("file, changes", [
    ("tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast"}),
    ("tokenizer_config.json", {"auto_map": {"AutoTokenizer": [None, "tokenization_x.XTokenizer"]}}),
    ("config.json", {"model_type": "deepseek_v3"}),
], ids=["another class", "custom code", "another model type"])
def test_any_other_checkpoint_goes_through_autotokenizer(tiny_llama, tmp_path, file, changes):
    folder = edited(tiny_llama, tmp_path / "model", file, **changes)
    assert not is_generic(folder)
    if "auto_map" not in changes:  # custom code would need trust_remote_code, and the code itself
        assert type(load_tokenizer(folder)) is type(AutoTokenizer.from_pretrained(folder))


def test_autotokenizer_trusts_the_generic_class_for_these_model_types():
    """The transformers fact the shortcut stands on (5.19, tokenization_auto)."""
    assert not set(GENERIC_MODEL_TYPES) & tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
