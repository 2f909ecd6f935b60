"""tutorial.py edited by hand for torch_xla (every CUDA line changed the way a user would)."""

import json

import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm

device = torch_xla.device()
torch.manual_seed(0)
torch_xla.manual_seed(0)

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 32).to(device)
y = torch.randint(0, 4, (64,), device=device)
weight = torch.ones(4, device=device)

losses = []
for step in range(5):
    optimizer.zero_grad()
    with torch.autocast("xla", dtype=torch.bfloat16):
        out = model(x)
    loss = nn.functional.cross_entropy(out.float(), y.to(device), weight=weight)
    loss.backward()
    optimizer.step()
    torch_xla.sync()
    xm.wait_device_ops()
    losses.append(loss.item())

print(json.dumps({"losses": losses, "device": str(x.device)}))
