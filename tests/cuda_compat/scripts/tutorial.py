"""A CUDA-only, tutorial-style training script, exactly as it would be written for a GPU."""

import json

import torch
import torch.nn as nn

assert torch.cuda.is_available(), "this tutorial needs a GPU"
torch.cuda.set_device(0)
device = torch.device("cuda")
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 32).cuda()
y = torch.randint(0, 4, (64,), device="cuda")
weight = torch.ones(4, device=device)

losses = []
for step in range(5):
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = nn.functional.cross_entropy(out.float(), y.to("cuda:0"), weight=weight)
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    losses.append(loss.item())

print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
print(json.dumps({"losses": losses, "device": str(x.device)}))
