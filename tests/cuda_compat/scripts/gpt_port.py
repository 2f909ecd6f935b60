"""gpt_cuda.py ported by hand: --device=cpu or --device=xla (torch_xla), "gloo" for several processes."""

import json
import os
import sys
import time

import torch
import torch.nn as nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
compile_model = args.get("compile") == "1"
on_xla = args.get("device") == "xla"
if on_xla:
    import torch_xla
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="gloo")
    rank = int(os.environ["RANK"])
else:
    rank = 0
device = torch_xla.device() if on_xla else torch.device("cpu")
torch.manual_seed(1337)
vocab, block, batch = 32, 16, 8


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.pos = nn.Embedding(block, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.emb(idx) + self.pos(pos)
        x = x + self.mlp(x)
        logits = self.head(x)
        return nn.functional.cross_entropy(logits.view(-1, vocab), targets.view(-1))


data = torch.randint(0, vocab, (4096,), generator=torch.Generator().manual_seed(7 + rank))


def get_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    ix = torch.randint(len(data) - block - 1, (batch,), generator=torch.Generator().manual_seed(step))
    x = torch.stack([data[i : i + block] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + block] for i in ix])
    return x.to(device), y.to(device)


model = TinyLM()
if "init" in args:
    model.load_state_dict(torch.load(args["init"], map_location="cpu"))
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), fused=not on_xla)
if compile_model:
    model = torch.compile(model, backend="openxla") if on_xla else torch.compile(model)
if ddp:
    model = DDP(model)

losses = []
start = time.perf_counter()
for step in range(int(args.get("steps", 6))):
    x, y = get_batch(step)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if on_xla:
        torch_xla.sync()
    losses.append(loss.item())
elapsed_ms = (time.perf_counter() - start) * 1000
print(json.dumps({"rank": rank, "losses": losses, "device": str(x.device), "elapsed_ms": elapsed_ms}), flush=True)
if ddp:
    destroy_process_group()
