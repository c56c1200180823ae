"""Engines, sizes and the documented arithmetic the instance-memory tests check the estimate against."""

GiB = 2**30
MiB = 2**20
# The gpu-trtllm profile's engine: Llama-3.2-1B-Instruct, float16, 4 sequences of 2048 tokens.
ENGINE_1B = {"engine": "tensorrt_llm", "dtype": "float16", "max_batch_size": 4, "max_seq_len": 2048}
ENGINE_8B = {"engine": "tensorrt_llm", "dtype": "bfloat16", "max_batch_size": 8, "max_seq_len": 4096}


def engine_bytes(params, model, engine):
    """What one instance needs before its KV cache, by the documented rule: weights (2 bytes per
    parameter) + 10 % of (weights + a full batch's KV cache) + 512 MiB."""
    weights = params * 2
    kv = (2 * model["num_hidden_layers"] * model["num_key_value_heads"] * model["head_dim"]
          * engine["max_seq_len"] * engine["max_batch_size"] * 2)
    return weights + int(0.1 * (weights + kv) + 512 * MiB), kv


def free_before(instance, gpu, needs, fraction):
    """Free memory when instance ``instance`` starts: each earlier one left (1 - fraction) of what
    was free after its engine."""
    free = gpu
    for _ in range(instance - 1):
        free = free - needs - int(fraction * (free - needs))
    return free
