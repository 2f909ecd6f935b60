"""Train a few steps with ad.distributed.wrap(model, STRATEGY) for each STRATEGY argument in turn (a fresh model
each); print a digest of every parameter per rank and strategy.

The model lives inside main(), so that ad.distributed.shutdown() can collect it before destroying the
group: a DDP/FSDP model still alive at interpreter exit dies after the group, and torch 2.13 (gloo)
then sometimes aborts ("terminate called without an active exception"; plain torchrun too).
"""

import hashlib
import json
import sys

import torch
from torch import nn

import anydevice as ad


class Net(nn.Module):
    """Blocks in a ModuleList, as in transformers: FSDP shards each block (a ModuleList itself has no forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.ReLU(), nn.Linear(16, 16)) for _ in range(2))
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = x + block(x)
        return self.out(x)


def main(strategy: str) -> None:
    rank = ad.distributed.rank()
    ad.manual_seed(0)  # same initial weights everywhere
    model = ad.distributed.wrap(ad.to(Net()), strategy)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(100 + rank)  # different data on each rank
    losses = []
    for _ in range(5):
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    kinds = sorted({type(p).__name__ for p in model.parameters()})
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]  # FSDP2 shards are DTensors
    values = torch.cat([p.detach().to("cpu", torch.float64).flatten() for p in full]).tolist()
    digest = hashlib.sha256(repr(values).encode()).hexdigest()  # repr of a float is exact: equal digests, equal bits
    row = {
        "strategy": strategy,
        "rank": rank,
        "world_size": ad.distributed.world_size(),
        "wrapper": type(model).__name__,
        "param_types": kinds,
        "params": digest,
        "losses": losses,
    }
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    ad.distributed.init(timeout_s=60)
    for name in sys.argv[1:]:
        main(name)
    ad.distributed.shutdown()
