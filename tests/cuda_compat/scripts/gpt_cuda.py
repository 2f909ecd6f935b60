"""A CUDA-only training script in the style of nanoGPT's train.py, exactly as written for GPUs.

pin_memory() in the loop, is_bf16_supported(), autocast("cuda"), a GradScaler, fused AdamW,
torch.compile (--compile), CUDA event timing, torch.load of a GPU checkpoint without map_location
(--init CKPT), DDP over "nccl" when launched with several processes. Prints one JSON line.
"""

import json
import os
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
compile_model = args.get("compile") == "1"
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="nccl")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}"
    torch.cuda.set_device(device)
else:
    rank, device = 0, "cuda"
torch.manual_seed(1337)
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() and args.get("dtype") == "bf16" else "float32"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
ctx = torch.amp.autocast(device_type="cuda", dtype=ptdtype) if dtype != "float32" else nullcontext()
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
    return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)


model = TinyLM()
if "init" in args:
    model.load_state_dict(torch.load(args["init"]))  # a checkpoint saved on a GPU, no map_location
model.to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), fused=True)
if compile_model:
    model = torch.compile(model)
if ddp:
    model = DDP(model, device_ids=[local_rank])

start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
losses = []
start.record()
for step in range(int(args.get("steps", 6))):
    x, y = get_batch(step)
    with ctx:
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
end.record()
torch.cuda.synchronize()
elapsed_ms = start.elapsed_time(end)
if rank == 0:
    print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB, {elapsed_ms:.0f} ms")
print(json.dumps({"rank": rank, "losses": losses, "device": str(x.device), "elapsed_ms": elapsed_ms}), flush=True)
if ddp:
    destroy_process_group()
