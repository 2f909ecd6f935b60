"""A CUDA-only DDP script as written for torchrun on GPUs: "nccl", cuda:LOCAL_RANK, device_ids."""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
device = torch.device(f"cuda:{local_rank}")
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).cuda(local_rank)
ddp = DDP(model, device_ids=[local_rank], output_device=local_rank)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
data = torch.Generator().manual_seed(100 + rank)

losses = []
for step in range(6):
    x = torch.randn(8, 16, generator=data).to(device, non_blocking=True)
    y = x.sum(dim=1, keepdim=True).cuda()
    loss = nn.functional.mse_loss(ddp(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    losses.append(loss.item())

weights = sum(float(p.detach().sum()) for p in model.parameters())
print(json.dumps({"rank": rank, "backend": dist.get_backend(), "losses": losses, "weights": weights}), flush=True)
dist.destroy_process_group()
