"""A nanoGPT-shaped training loop without a DataLoader: ``python get_batch.py [--iters N]``.

Batches come from its own ``get_batch()`` (random windows of a token stream), the loss is evaluated under
``torch.no_grad()`` before the first step, and gradients are accumulated over two micro-steps per optimizer step.
"""

import argparse

import torch
from torch import nn

BLOCK, BATCH, VOCAB = 16, 4, 64


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.embed(idx))
        return logits, nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def get_batch(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(len(data) - BLOCK - 1, (BATCH,))
    x = torch.stack([data[i : i + BLOCK] for i in starts])
    y = torch.stack([data[i + 1 : i + 1 + BLOCK] for i in starts])
    return x, y


@torch.no_grad()
def estimate_loss(model: TinyLM, data: torch.Tensor) -> float:
    model.eval()
    losses = [model(*get_batch(data))[1].item() for _ in range(3)]
    model.train()
    return sum(losses) / len(losses)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.randint(VOCAB, (1000,))
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for it in range(args.iters):
        if it % 4 == 0:
            print(f"iter {it}: val loss {estimate_loss(model, data):.3f}")
        for _ in range(2):  # gradient accumulation
            _, loss = model(*get_batch(data))
            (loss / 2).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print("done")


if __name__ == "__main__":
    main()
