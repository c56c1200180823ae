"""The dtype keyword of ``from_pretrained`` follows the installed transformers: ``torch_dtype`` before
4.56 (4.47.1, the TensorRT-LLM container's, hands an unknown ``dtype=`` to the model's ``__init__``),
``dtype`` from 4.56 on."""
import pytest

from scripts.model.hf_dtype import dtype_keyword, dtype_kwargs


@pytest.mark.parametrize("version, keyword", [
    ("4.47.1", "torch_dtype"), ("4.47.0", "torch_dtype"), ("4.55.4", "torch_dtype"),
    ("4.56.0", "dtype"), ("4.56.0.dev0", "dtype"), ("4.57.1", "dtype"), ("5.0.0rc1", "dtype"), ("5.19.0", "dtype"),
])
def test_keyword_by_version(version, keyword):
    assert dtype_keyword(version) == keyword
    assert dtype_kwargs("float32", version) == {keyword: "float32"}


def test_installed_version_is_read_when_none_is_given(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.47.1")
    assert dtype_keyword() == "torch_dtype"
    monkeypatch.setattr(transformers, "__version__", "4.56.2")
    assert dtype_keyword() == "dtype"


def test_a_version_that_is_not_one_says_so():
    with pytest.raises(ValueError, match=r"not a transformers version: 'dev'.*4\.47\.1"):
        dtype_keyword("dev")
