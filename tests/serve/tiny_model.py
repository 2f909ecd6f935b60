"""A tiny random-initialised Llama with a tokenizer trained here, written as a Hugging Face model directory.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on ``examples/data/corpus.txt`` and the
weights are random. The shape fits vLLM's CPU path: float32 (bfloat16 kills the CPU worker on some
processors) and head size 64 (its CPU attention rejects 16).
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "data" / "corpus.txt"
VOCAB = 512
HIDDEN, HEAD_DIM, LAYERS, CONTEXT = 128, 64, 2, 512


def write_tokenizer(directory: Path) -> None:
    """Train a small byte-level BPE on the repo's corpus and save it as a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(CORPUS)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")
    fast.model_max_length = CONTEXT
    fast.save_pretrained(directory)


def write_model(directory: Path, seed: int = 0) -> Path:
    """Write the tokenizer and a random two-layer Llama (float32) to ``directory``; returns it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    write_tokenizer(directory)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HIDDEN // HEAD_DIM,
        num_key_value_heads=HIDDEN // HEAD_DIM,
        head_dim=HEAD_DIM,
        max_position_embeddings=CONTEXT,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(directory)
    (directory / "anydevice-tiny.json").write_text(json.dumps({"vocab": VOCAB, "hidden": HIDDEN, "head_dim": HEAD_DIM}))
    return directory


if __name__ == "__main__":
    import sys

    print(write_model(Path(sys.argv[1])))
