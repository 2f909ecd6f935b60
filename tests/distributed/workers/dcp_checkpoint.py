"""ad.checkpoint round trips: ``save DIR STRATEGY`` trains 3 steps and saves; ``load DIR STRATEGY`` loads a fresh model.

STRATEGY is ``fsdp``, ``ddp`` or ``none`` (a plain model, also without a launcher). Both modes then
take one more step on the same batch, so a missing optimizer state shows in the digest. Prints one
JSON line per rank: the parameter digests after save/load and after the extra step, the loaded step.
"""

import json
import sys

import torch
from torch import nn

import anydevice as ad


class Net(nn.Module):
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


def digest(model: nn.Module) -> float:
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    flat = torch.cat([p.detach().to("cpu", torch.float64).flatten() for p in full])
    return float((flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum())


def train_step(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    x = ad.to(torch.randn(16, 8, generator=torch.Generator().manual_seed(seed)))
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    ad.step()


def main(mode: str, directory: str, strategy: str) -> None:
    if strategy != "none":
        ad.distributed.init(timeout_s=60)
    ad.manual_seed(0 if mode == "save" else 1)  # a loaded model starts from different weights
    model = ad.to(Net())
    if strategy != "none":
        model = ad.distributed.wrap(model, strategy)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    if mode == "save":
        for step in range(3):
            train_step(model, opt, step)
        ad.checkpoint.save({"model": model, "optim": opt, "step": 3, "note": "three steps"}, directory)
        loaded = {"step": 3, "note": "three steps"}
    else:
        loaded = ad.checkpoint.load({"model": model, "optim": opt, "step": 0, "note": ""}, directory)
    after_load = digest(model)
    train_step(model, opt, 99)
    row = {"rank": ad.distributed.rank(), "step": loaded["step"], "note": loaded["note"], "digest": after_load}
    row["digest_after_step"] = digest(model)
    print(json.dumps(row), flush=True)
    del model, opt
    ad.distributed.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
