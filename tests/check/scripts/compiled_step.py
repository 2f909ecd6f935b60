"""A training step written as a @torch.compile'd function, as torch's tutorials show (anydevice check observes it)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=8)


@torch.compile  # CHECK: compiled
def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.cross_entropy(model(x), y)  # CHECK: model call
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


for x, y in data:
    train_step(x, y)
