"""loader_cuda.py ported by hand: --device=cpu or --device=xla (torch_xla); --spawn=N uses "gloo"."""

import json
import os
import sys

import torch
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])


def train(rank: int, world_size: int) -> None:
    on_xla = args.get("device") == "xla"
    if world_size > 1:
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ.setdefault("MASTER_PORT", args.get("port", "29517"))
        torch.distributed.init_process_group(backend="gloo", rank=rank, world_size=world_size)
    if on_xla:
        import torch_xla

        device = torch_xla.device()
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(10 + rank)
    data = TensorDataset(torch.randn(96, 20, generator=g), torch.randint(0, 5, (96,), generator=g))
    loader = DataLoader(data, batch_size=16, shuffle=False, num_workers=0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).to(device)
    if world_size > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if on_xla:
                torch_xla.sync()
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
