"""One model, two optimizers (AdamW for the weight matrices, SGD for the biases), as split-optimizer recipes do."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
matrices = [p for p in model.parameters() if p.dim() == 2]
biases = [p for p in model.parameters() if p.dim() == 1]
opt_matrices = torch.optim.AdamW(matrices, lr=1e-3)
opt_biases = torch.optim.SGD(biases, lr=0.1, momentum=0.9)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randn(64, 8)), batch_size=8)

for x, y in data:
    nn.functional.mse_loss(model(x), y).backward()
    opt_matrices.step()
    opt_biases.step()
    opt_matrices.zero_grad()
    opt_biases.zero_grad()
