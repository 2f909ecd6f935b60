"""A training script that reads an input file and writes where it runs, as real ones do: ``python writes_files.py``.

Reads ``input.txt`` (relative to the working directory) and imports ``local_helper`` from its own folder; writes
``train.log`` (truncating it), ``ckpt.pt`` (``torch.save``, C++'s writer), ``out/ckpt.pt`` into an existing folder
and ``beside.pt`` next to itself (``os.path.dirname(__file__)``); clears ``old_runs/`` (``shutil.rmtree``) and removes
``stale.pt`` next to itself. Under ``anydevice check`` none of these may reach the user's folders.
"""

import os
import shutil
from pathlib import Path

import local_helper
import torch

scale = float(Path("input.txt").read_text().split()[0])
assert os.path.exists("input.txt") and "input.txt" in os.listdir(".")
log = open("train.log", "w")  # kept open for the run, as training scripts do
torch.save({"scale": scale}, "ckpt.pt")
os.makedirs("out", exist_ok=True)
torch.save({"scale": scale}, os.path.join("out", "ckpt.pt"))
torch.save({"scale": scale}, os.path.join(os.path.dirname(os.path.abspath(__file__)), "beside.pt"))
here = os.path.dirname(os.path.abspath(__file__))
shutil.rmtree("old_runs", ignore_errors=True)
if os.path.exists(os.path.join(here, "stale.pt")):
    try:
        os.remove(os.path.join(here, "stale.pt"))
    except OSError:
        pass  # under check: refused, as on a read-only file system (EROFS)
model = torch.nn.Linear(4, local_helper.WIDTH)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=8)
for (x,) in loader:
    loss = (model(x) * scale).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    log.write(f"loss {loss.item():.4f}\n")
    log.flush()
print("done")
