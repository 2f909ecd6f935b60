"""A GAN as users write it: two models, two AdamW, the discriminator stepped first (anydevice check counts both)."""

import torch
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
discriminator = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
opt_g = torch.optim.AdamW(generator.parameters(), lr=2e-4)
opt_d = torch.optim.AdamW(discriminator.parameters(), lr=2e-4)
bce = nn.BCEWithLogitsLoss()
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)), batch_size=8)

for (real,) in data:
    fake = generator(torch.randn(real.shape[0], 16))
    loss_d = bce(discriminator(real), torch.ones(real.shape[0], 1)) + bce(
        discriminator(fake.detach()), torch.zeros(real.shape[0], 1)
    )
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()  # CHECK: discriminator step
    loss_g = bce(discriminator(fake), torch.ones(real.shape[0], 1))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()  # CHECK: generator step
