"""Tensor parallelism in pytorch/examples' idiom: init_device_mesh("cuda"), ColwiseParallel/RowwiseParallel."""

import json
import os

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class ToyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.in_proj = nn.Linear(8, 16)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.relu(self.in_proj(x)))


device_type = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
device_type = os.environ.get("TP_DEVICE", device_type)
mesh = init_device_mesh(device_type, (int(os.environ["WORLD_SIZE"]),))
rank = mesh.get_rank()
torch.manual_seed(0)
model = ToyMLP().to(device_type)
model = parallelize_module(model, mesh, {"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()})
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=True)
losses = []
for step in range(4):
    torch.manual_seed(step)  # every rank the same batch
    if os.environ.get("TP_INPUT") == "host":  # drawn by the CPU generator on every device (XLA's draws other numbers)
        x = torch.rand(5, 8).to(device_type)
    else:
        x = torch.rand(5, 8, device=device_type)
    loss = model(x).pow(2).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print(json.dumps({"rank": rank, "mesh": mesh.device_type, "losses": losses}), flush=True)
