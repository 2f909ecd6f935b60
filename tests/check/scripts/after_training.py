"""Trains a few steps, then validates under inference mode and samples with a generator on the device: both come
after the steps `anydevice check` runs, and torch_xla refuses both (tests/check/test_refused_calls.py)."""

import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cpu")  # a script for xla would name its device here
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
for x, y in data:
    loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()

with torch.inference_mode():  # CHECK: inference_mode
    print("validation loss", torch.nn.functional.mse_loss(model(torch.randn(8, 8, device=device)), torch.zeros(8, 1)).item())
generator = torch.Generator(device=device).manual_seed(0)  # CHECK: generator
print("sample", torch.randn(2, generator=generator, device=device).tolist())
