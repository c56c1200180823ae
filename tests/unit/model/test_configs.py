"""scripts.model.configs: the Llama parameter count from a config.json, checked on published sizes."""
from scripts.model.configs import LLAMA_3_1_8B, LLAMA_3_2_1B, llama_parameter_count


def test_parameter_counts_match_the_published_sizes():
    assert llama_parameter_count(LLAMA_3_2_1B) == 1_235_814_400      # "1.24B"
    assert llama_parameter_count(LLAMA_3_1_8B) == 8_030_261_248      # "8.03B"
    untied = dict(LLAMA_3_2_1B, tie_word_embeddings=False)
    assert llama_parameter_count(untied) == 1_235_814_400 + 128256 * 2048


def test_biases_and_defaults():
    plain = {"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
             "num_attention_heads": 2}
    # no num_key_value_heads: one per attention head; no head_dim: hidden_size // heads; untied LM head
    per_layer = 4 * 8 * 8 + 3 * 8 * 16 + 2 * 8
    assert llama_parameter_count(plain) == 10 * 8 + 2 * per_layer + 8 + 10 * 8
    biased = plain | {"attention_bias": True, "mlp_bias": True}
    assert llama_parameter_count(biased) == llama_parameter_count(plain) + 2 * ((8 + 2 * 8 + 8) + (2 * 16 + 8))
