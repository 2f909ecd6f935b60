"""A device-agnostic program in pytorch/examples' ``--accel`` idiom: it asks ``torch.accelerator`` for its device.

Three parts, one JSON line: an optimizer loop; word_language_model's hand-written update (no optimizer, the
data on the device and sliced at a moving offset, ``loss.item()`` every batch); a sampling loop with a
``torch.Generator(device=...)`` (diffusers' ``randn_tensor`` shape: noise drawn with the generator, then moved).
"""

import json
import sys

import torch
from torch import nn

use_accel = torch.accelerator.is_available()
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
if use_accel:
    torch.accelerator.set_device_index(0)
    module = torch.get_device_module(device)
    count = torch.accelerator.device_count()
torch.manual_seed(0)

# 1. an optimizer loop
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8).to(device), torch.randn(32, 1).to(device)
trained = []
for _ in range(4):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    trained.append(loss.item())
if use_accel:
    torch.accelerator.synchronize()
    torch.accelerator.memory_allocated()


# 2. word_language_model: parameters updated by hand
class RNNModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.rnn, self.decoder = nn.Embedding(40, 16), nn.LSTM(16, 16), nn.Linear(16, 40)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, 40), hidden


lm = RNNModel().to(device)
data = torch.randint(0, 40, (8 * 4 + 1, 4)).to(device)  # batchify: the whole corpus on the device
hidden = (torch.zeros(1, 4, 16, device=device), torch.zeros(1, 4, 16, device=device))
by_hand = []
for epoch in range(2):
    total = 0.0
    for i in range(0, 8 * 4, 8):
        inputs, targets = data[i : i + 8], data[i + 1 : i + 9].reshape(-1)
        hidden = tuple(h.detach() for h in hidden)
        lm.zero_grad()
        output, hidden = lm(inputs, hidden)
        loss = nn.functional.cross_entropy(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 0.25)
        for p in lm.parameters():
            p.data.add_(p.grad, alpha=-2.0)
        total += loss.item()
    by_hand.append(total / 4)

# 3. sampling with a generator made for the model's device
denoiser = nn.Conv2d(3, 3, 3, padding=1).to(device)
generator = torch.Generator(device=device).manual_seed(7)
noise = torch.randn((1, 3, 8, 8), generator=generator, device=generator.device).to(device)
with torch.inference_mode():
    for _ in range(3):
        noise = noise - 0.1 * denoiser(noise)
sample = noise.sum().item()

where = {"model": str(next(model.parameters()).device), "lm": str(next(lm.parameters()).device), "sample": str(noise.device)}
print(json.dumps({"trained": trained, "by_hand": by_hand, "sample": sample, "where": where}))
if "--refuse" in sys.argv:
    torch.accelerator.current_stream()
