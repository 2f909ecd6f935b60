"""Train a few steps with ad.distributed.wrap(model, STRATEGY); print the parameter checksum per rank."""

import json
import sys

import torch
from torch import nn

import anydevice as ad

strategy = sys.argv[1]
ad.distributed.init(timeout_s=60)
rank = ad.distributed.rank()
ad.manual_seed(0)  # same initial weights everywhere
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
model = ad.distributed.wrap(ad.to(model), strategy)
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
checksum = torch.cat([p.detach().to("cpu", torch.float64).flatten() for p in full]).tolist()
print(json.dumps({"rank": rank, "world_size": ad.distributed.world_size(), "wrapper": type(model).__name__,
                  "param_types": kinds, "params": checksum, "losses": losses}), flush=True)
ad.distributed.shutdown()
