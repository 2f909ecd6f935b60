"""torch.accelerator's device-agnostic idiom: the accelerator when there is one, bf16 autocast there, else fp32 on cpu."""

import _digest
import torch
from torch import nn

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
use_amp = torch.accelerator.is_available()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
losses = []
for _ in range(3):
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
        loss = nn.functional.mse_loss(model(x).float(), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
_digest.record("answers", [torch.accelerator.is_available(), torch.accelerator.device_count(), str(device), use_amp])
_digest.record("losses", losses)
_digest.record("module", torch.get_device_module().__name__)
_digest.done()
