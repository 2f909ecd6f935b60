"""Train a tiny random-init Llama (tied embeddings) with ad.distributed.wrap(model, STRATEGY); print losses per rank.

Every rank sees its own fixed batch, so DDP and FSDP see the same data and must give the same losses.
"""

import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import anydevice as ad


def main(strategy: str) -> None:
    ad.distributed.init(timeout_s=60)
    rank = ad.distributed.rank()
    ad.manual_seed(0)  # the same initial weights on every rank
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    model = ad.distributed.wrap(ad.to(model), strategy)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # different data on each rank
    batch = torch.randint(0, config.vocab_size, (4, 16), generator=gen)
    losses = []
    for _ in range(4):
        loss = model(input_ids=ad.to(batch), labels=ad.to(batch)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    units = sorted(type(m).__name__ for m in model.modules() if type(m).__name__.startswith("FSDP"))
    print(json.dumps({"rank": rank, "world_size": ad.distributed.world_size(), "tied": tied, "units": units, "losses": losses}))


if __name__ == "__main__":
    main(sys.argv[1])
    ad.distributed.shutdown()
