"""Worker: ad.checkpoint of a tensor-parallel model, resharded on load.

argv: MODE DIR. ``save``: split TinyLM over every rank (every device on XLA SPMD), one AdamW step, save;
rank 0 also writes DIR.ref.pt, the full weights. ``load-plain`` (one process) / ``load-fsdp``: load into a
freshly initialised model and print the largest difference from the saved weights.
"""

from __future__ import annotations

import json
import sys

import torch
from tp_losses import TinyLM

import anydevice as ad


def full(t: torch.Tensor) -> torch.Tensor:
    gather = getattr(t, "full_tensor", None)
    return (gather() if callable(gather) else t).detach().cpu()


def main() -> None:
    mode, directory = sys.argv[1], sys.argv[2]
    if mode == "save":
        mesh = ad.distributed.mesh({"tp": -1})  # first: XLA SPMD must start before any tensor is on the device
        torch.manual_seed(0)
        model = ad.distributed.parallelize(TinyLM(), "auto", mesh=mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        idx = torch.randint(0, 32, (4, 8), generator=torch.Generator().manual_seed(1))
        model(idx.to(ad.device())).float().pow(2).mean().backward()
        optimizer.step()
        ad.step()
        ad.checkpoint.save({"model": model, "optim": optimizer, "step": 1}, directory)
        weights = {n: full(p) for n, p in model.named_parameters()}
        if ad.distributed.rank() == 0:
            torch.save(weights, directory + ".ref.pt")
        print(json.dumps({"rank": ad.distributed.rank(), "mesh": ad.distributed.mesh_degrees(mesh)}), flush=True)
    else:
        torch.manual_seed(123)  # other values than the checkpoint's
        model = TinyLM().to(ad.device())
        if mode == "load-fsdp":
            model = ad.distributed.wrap(model, "fsdp")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        state = ad.checkpoint.load({"model": model, "optim": optimizer, "step": 0}, directory)
        ref = torch.load(directory + ".ref.pt")
        diff = max(float((full(p) - ref[n]).abs().max()) for n, p in model.named_parameters())
        steps = {int(s["step"]) for s in optimizer.state.values()}
        print(json.dumps({"rank": ad.distributed.rank(), "step": state["step"], "max_diff": diff, "optim_steps": sorted(steps)}))
    ad.distributed.shutdown()


if __name__ == "__main__":
    main()
