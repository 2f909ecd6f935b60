"""A CUDA-only script in the style of pytorch/examples (mnist, imagenet, ddp-tutorial multigpu.py).

The device comes from torch.accelerator, a DataLoader with pin_memory=True, batches moved with
.cuda(non_blocking=True), Adam with a GradScaler("cuda"); --spawn=N starts N processes with
mp.spawn that join a "nccl" group and wrap the model in DDP(device_ids=[rank]). Prints JSON lines.
"""

import json
import os
import sys

import torch
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])


def train(rank: int, world_size: int) -> None:
    if world_size > 1:
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ.setdefault("MASTER_PORT", args.get("port", "29517"))
        torch.cuda.set_device(rank)
        torch.distributed.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(10 + rank)
    data = TensorDataset(torch.randn(96, 20, generator=g), torch.randint(0, 5, (96,), generator=g))
    loader = DataLoader(data, batch_size=16, shuffle=False, num_workers=0, pin_memory=True)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).to(rank if world_size > 1 else device)
    if world_size > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    losses = []
    for epoch in range(2):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            with torch.autocast("cuda", enabled=False):
                loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
    print(json.dumps({"rank": rank, "device": str(x.device), "losses": losses, "reported": str(device)}), flush=True)
    if world_size > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    world_size = int(args.get("spawn", "1"))
    if world_size > 1:
        mp.spawn(train, args=(world_size,), nprocs=world_size)
    else:
        train(0, 1)
