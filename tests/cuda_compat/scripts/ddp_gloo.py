"""ddp_nccl.py edited by hand for CPU processes: "gloo", no device ids, no .cuda()."""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cpu")
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
ddp = DDP(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
data = torch.Generator().manual_seed(100 + rank)

losses = []
for step in range(6):
    x = torch.randn(8, 16, generator=data).to(device, non_blocking=True)
    y = x.sum(dim=1, keepdim=True)
    loss = nn.functional.mse_loss(ddp(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

weights = sum(float(p.detach().sum()) for p in model.parameters())
print(json.dumps({"rank": rank, "backend": dist.get_backend(), "losses": losses, "weights": weights}), flush=True)
dist.destroy_process_group()
