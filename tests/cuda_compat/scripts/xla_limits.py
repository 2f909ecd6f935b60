"""What scripts hit after training on xla: validation under torch.inference_mode(), a sampling generator on the model device."""

import json

import torch

device = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Linear(4, 2).to(device)
x = torch.randn(3, 4).to(device)
with torch.inference_mode():
    out = model(x)


@torch.inference_mode()
def evaluate(v):
    return model(v)


g = torch.Generator(device=x.device).manual_seed(5)  # diffusers' sampling idiom: a generator on the model's device
noise = torch.randn((2, 3), generator=g)
print(json.dumps({"out": out.sum().item(), "again": evaluate(x).sum().item(), "noise": noise.tolist(), "gen": str(g.device)}))
