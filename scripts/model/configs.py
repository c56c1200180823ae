"""Architecture fields of the models this tutorial serves, as their Hugging Face ``config.json`` has them.

The GPU-memory estimate (:mod:`scripts.triton.memory`) reads the sizes (the parameter count
follows from them) and the layers, KV heads and ``head_dim`` (the KV cache); the context length
and the dtype the weights ship in are there for reference.
"""
from __future__ import annotations

from typing import Any

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
