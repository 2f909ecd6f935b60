"""A tiny random-init Llama trained in a plain PyTorch loop."""

import json
import sys

import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM


def main(steps: int) -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = accelerator.prepare(model, opt)
    data = torch.randint(0, 64, (32, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for step in range(steps):
        start = (step * 4) % len(data)
        batch = data[start : start + 4].to(accelerator.device)
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    print(json.dumps({"device": str(next(model.parameters()).device), "losses": [x.item() for x in losses]}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
