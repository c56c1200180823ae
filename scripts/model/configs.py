"""Architecture fields of the models this tutorial serves, as their Hugging Face ``config.json`` has them.

The GPU-memory estimate (:mod:`scripts.capacity.instance_memory`) reads the sizes (the parameter
count follows from them: :func:`llama_parameter_count`) and the layers, KV heads and ``head_dim``
(the KV cache); the context length and the dtype the weights ship in are there for reference.
"""
from __future__ import annotations

from typing import Any, Mapping

#: The fields :func:`llama_parameter_count` reads (``num_key_value_heads`` and ``head_dim`` have defaults).
LLAMA_SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")

#: meta-llama/Llama-3.2-1B-Instruct (the ``gpu-trtllm`` profile's model).
LLAMA_3_2_1B: dict[str, Any] = {
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}

#: meta-llama/Llama-3.1-8B-Instruct: the size most single-GPU deployments serve (16 GB of bf16 weights).
LLAMA_3_1_8B: dict[str, Any] = {
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def llama_parameter_count(config: Mapping[str, Any]) -> int:
    """Parameters of a Llama-architecture model from its Hugging Face ``config.json`` dict.

    Embeddings + per layer (q, k, v, o projections, gate/up/down MLP, two RMSNorms) + final norm
    + LM head (unless ``tie_word_embeddings``). Biases are counted when ``attention_bias`` /
    ``mlp_bias`` are set. ``num_key_value_heads`` defaults to ``num_attention_heads``, ``head_dim``
    to ``hidden_size // num_attention_heads``. The :data:`LLAMA_SIZE_FIELDS` must be there (the
    memory estimate checks them first and says which is missing or malformed).
    """
    vocab, hidden, inter, layers, heads = (int(config[key]) for key in LLAMA_SIZE_FIELDS)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if config.get("attention_bias"):
        attention += q + 2 * kv + hidden
    mlp = 3 * hidden * inter + (2 * inter + hidden if config.get("mlp_bias") else 0)
    per_layer = attention + mlp + 2 * hidden
    lm_head = 0 if config.get("tie_word_embeddings", False) else vocab * hidden
    return vocab * hidden + layers * per_layer + hidden + lm_head
