"""Make the embedded tiny Llama of the ``cpu`` profile, offline and deterministically.

The model is a real Hugging Face Llama (``LlamaForCausalLM``) with a byte-level BPE tokenizer,
both trained here on text this repository owns (``scripts/model/data``). It is small enough to train
in well under a minute on two cores, and it memorises its text, so greedy answers are readable
sentences and stable: the margins between the top tokens are large, which keeps greedy output
identical across vLLM, Triton and Ray Serve.

Command line: ``tutorial-make-tiny-llama OUTPUT_DIR``.
"""
from __future__ import annotations

import argparse
import json
import random
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

# tqdm's notebook progress bar wants ipywidgets; transformers' bars are off anyway (quiet_transformers)
warnings.filterwarnings("ignore", message="IProgress not found")

DATA_DIR = Path(__file__).resolve().parent / "data"
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
SPECIAL_TOKENS = [BOS, EOS, PAD, *ROLE_TOKENS]
# One message per turn: role token, newline, content, end-of-sequence token, newline.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyLlamaSpec:
    """Architecture and training settings; the defaults make a model of about 0.5 M parameters."""

    vocab_size: int = 2048          # upper bound for the BPE trainer; the model uses the real size
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    train_steps: int = 300
    batch_size: int = 16
    learning_rate: float = 3e-3
    seed: int = 0
    dtype: str = "bfloat16"


def quiet_transformers() -> None:
    """No progress bars or advisory warnings: notebook outputs stay the same run after run."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def corpus_lines(data_dir: Path = DATA_DIR) -> list[str]:
    return [line.strip() for line in (data_dir / "corpus.txt").read_text().splitlines() if line.strip()]


def chat_examples(data_dir: Path = DATA_DIR) -> list[dict]:
    rows = [json.loads(line) for line in (data_dir / "chat.jsonl").read_text().splitlines() if line.strip()]
    return [[{"role": "user", "content": r["user"]}, {"role": "assistant", "content": r["assistant"]}] for r in rows]


def train_tokenizer(spec: TinyLlamaSpec, data_dir: Path = DATA_DIR):
    """A byte-level BPE tokenizer with bos/eos/pad, role tokens and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts = corpus_lines(data_dir) + [m["content"] for conv in chat_examples(data_dir) for m in conv]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )


def training_sequences(tokenizer, data_dir: Path = DATA_DIR) -> list[list[int]]:
    """Each corpus line followed by the next one, and each chat exchange, as token-id lists."""
    lines = corpus_lines(data_dir)
    seqs = []
    for i, line in enumerate(lines):
        nxt = lines[(i + 1) % len(lines)]
        seqs.append(tokenizer(line + "\n" + nxt + EOS)["input_ids"])
    for conv in chat_examples(data_dir):
        text = tokenizer.apply_chat_template(conv, tokenize=False)
        seqs.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return seqs


def architecture(spec) -> dict:
    """The ``config.json`` architecture fields of a spec (this module's, or ``larger_llama``'s: the
    same fields), untied embeddings; the vocabulary size is the tokenizer's, so not among them."""
    return {"hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_hidden_layers, "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads, "tie_word_embeddings": False}


def llama_config(spec, **tokens_and_context):
    """The ``LlamaConfig`` of a spec's :func:`architecture`; ``tokens_and_context``: vocab_size,
    max_position_embeddings and the bos/eos/pad token ids."""
    from transformers import LlamaConfig

    return LlamaConfig(**architecture(spec), **tokens_and_context)


def make_tiny_llama(output_dir: str | Path, spec: TinyLlamaSpec = TinyLlamaSpec(), data_dir: Path = DATA_DIR) -> dict:
    """Train tokenizer and model and save both in Hugging Face format; returns a summary."""
    import torch
    from transformers import LlamaForCausalLM

    quiet_transformers()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec, data_dir)
    seqs = training_sequences(tokenizer, data_dir)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same summation order, so the same weights, every run
    try:
        torch.manual_seed(spec.seed)
        rng = random.Random(spec.seed)
        config = llama_config(spec, vocab_size=len(tokenizer), max_position_embeddings=spec.max_position_embeddings,
                              bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                              pad_token_id=tokenizer.pad_token_id)
        model = LlamaForCausalLM(config)
        opt = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.0)
        width = max(len(s) for s in seqs)
        losses = []
        model.train()
        for _ in range(spec.train_steps):
            batch = [seqs[rng.randrange(len(seqs))] for _ in range(spec.batch_size)]
            ids = torch.full((len(batch), width), tokenizer.pad_token_id)
            labels = torch.full((len(batch), width), -100)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, s in enumerate(batch):
                ids[r, : len(s)] = torch.tensor(s)
                labels[r, : len(s)] = torch.tensor(s)
                mask[r, : len(s)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
    finally:
        torch.set_num_threads(threads)

    model = model.to(getattr(torch, spec.dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    (output_dir / "tiny_llama_spec.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    files = sorted(p.name for p in output_dir.iterdir() if p.is_file())
    return {
        "model_dir": str(output_dir),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "training_sequences": len(seqs),
        "final_loss": round(losses[-1], 3),
        "size_bytes": sum((output_dir / f).stat().st_size for f in files),
        "files": files,
    }


def greedy_hf(model_dir: str | Path, prompt: str, max_new_tokens: int = 32) -> str:
    """Greedy continuation with plain transformers (a quick sanity check, not the engine)."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    from scripts.model.hf_dtype import dtype_kwargs

    quiet_transformers()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, **dtype_kwargs(torch.float32))
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="where to save the model and tokenizer (Hugging Face format)")
    parser.add_argument("--train-steps", type=int, default=TinyLlamaSpec.train_steps)
    args = parser.parse_args(argv)
    summary = make_tiny_llama(args.output_dir, TinyLlamaSpec(train_steps=args.train_steps))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
