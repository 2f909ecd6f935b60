"""Small models made to fail one check each, trained from a DataLoader: ``python cases.py CASE [--steps N]``.

Runs on the device ANYDEVICE selects (the cuda case on "cuda", as written for GPUs). Cases: clean,
branch (a Python branch on tensor data), nonzero, float64 (a float64 buffer), varying (a different
sequence length every batch), cuda (CUDA-only calls, as written for GPUs), avg (gradients averaged with
``ReduceOp.AVG`` straight through torch.distributed, and a loss averaged through ``ad.distributed``), mesh (a
device mesh whose tensor-parallel degree is 3: it divides neither 8 processes nor any TPU slice), mask (a boolean-mask
index, ``h[h > 0]``), float64-read (a float64 buffer only read through ``.float()``), short (a dataset that is not a
whole number of batches). Each offending line carries a ``# CHECK: <case>`` marker, which the tests look up.
"""

import argparse

import torch
from torch import nn

import anydevice as ad


class Model(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.lin = nn.Linear(8, 8)
        if case in ("float64", "float64-read"):
            self.register_buffer("scale", torch.ones(8, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.case == "branch":
            if h.mean() > 0:  # CHECK: branch
                h = h * 2
        if self.case == "nonzero":
            h = h + torch.nonzero(h > 0).shape[0]  # CHECK: nonzero
        if self.case == "float64":
            h = (h.double() * self.scale).float()  # CHECK: float64
        if self.case == "float64-read":
            h = h * self.scale.float()  # CHECK: float64-read
        if self.case == "mask":
            h = h + h[h > 0].sum()  # CHECK: mask
        return h.pow(2).mean()


def collate(rows: list[tuple[torch.Tensor]]) -> torch.Tensor:
    batch = torch.stack([r[0] for r in rows])
    return batch[:, : 2 + int(batch[0, 0, 0].abs() * 100) % 5]  # CHECK: varying (sequence length per batch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = 4 * args.steps + (2 if args.case == "short" else 0)
    data = torch.utils.data.TensorDataset(torch.randn(rows, 6, 8))
    varying = args.case == "varying"
    loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=collate if varying else None)
    device = "cuda" if args.case == "cuda" else ad.device()
    model = Model(args.case).to(device)
    if args.case == "cuda":
        torch.cuda.synchronize()  # CHECK: cuda
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.case == "avg":
        ad.distributed.init()  # a world of one here; torchrun makes it N
    if args.case == "mesh":
        ad.distributed.mesh({"dp": -1, "tp": 3})  # CHECK: mesh
    for batch in loader:  # CHECK: short
        x = batch if varying else batch[0]
        loss = model(x.to(device))
        loss.backward()
        if args.case == "avg":
            torch.distributed.all_reduce(model.lin.weight.grad, op=torch.distributed.ReduceOp.AVG)  # CHECK: avg
            ad.distributed.all_reduce(loss.detach().clone(), "avg")  # CHECK: ad-avg
        opt.step()
        opt.zero_grad()
        if args.case != "cuda":
            ad.step()
    print("done")


if __name__ == "__main__":
    main()
