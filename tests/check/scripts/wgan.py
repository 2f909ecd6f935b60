"""A WGAN-style loop: the critic steps 5 times for each generator step, and a fine-tuning optimizer is made for
later (`wgan.py`); anydevice check waits for the generator's step and lists the optimizer that never steps."""

import torch
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
critic = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt_g = torch.optim.RMSprop(generator.parameters(), lr=5e-5)
opt_c = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
finetune = torch.optim.SGD(critic.parameters(), lr=1e-3, momentum=0.9)  # CHECK: made for later
real = torch.randn(256, 16)

for step in range(100):
    batch = real[(step * 8) % 256 :][:8]
    fake = generator(torch.randn(8, 8))
    loss_c = critic(fake.detach()).mean() - critic(batch).mean()
    opt_c.zero_grad()
    loss_c.backward()
    opt_c.step()  # CHECK: critic step
    if step % 5 == 4:
        loss_g = -critic(fake).mean()
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()  # CHECK: generator step
