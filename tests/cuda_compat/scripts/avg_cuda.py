"""llm.c's DDP idiom: RANK set by the launcher -> init_process_group("nccl"), the loss averaged with ReduceOp.AVG."""

import json
import os

import torch
import torch.distributed as dist

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="nccl")
    device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
    torch.cuda.set_device(device)
else:
    device = "cpu"
torch.manual_seed(0)
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(3):
    x = torch.randn(4, 8).to(device)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    reported = loss.detach().clone()
    if ddp:
        dist.all_reduce(reported, op=dist.ReduceOp.AVG)
    losses.append(reported.item())
print(json.dumps({"ddp": ddp, "device": str(reported.device), "losses": losses}), flush=True)
if ddp:
    dist.destroy_process_group()
