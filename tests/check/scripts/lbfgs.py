"""LBFGS, whose step takes a closure that recomputes the loss (anydevice check runs the script's own closure)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(8, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
x, y = torch.randn(32, 8), torch.randn(32, 1)

for _ in range(10):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    optimizer.step(closure)  # CHECK: step
