"""A model whose forward uses torch.median(dim=...), which torch_xla 2.9 runs on the CPU (no XLA lowering).

Trains --steps steps (default 3) on random batches from a DataLoader; prints one JSON line at the end:
the steps done and ``ad.fallback_ops()``.
"""

import argparse
import json

import torch

import anydevice as ad


class MedianHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.median(h, dim=-1).values + h.mean(-1)  # median.dim falls back to the CPU on torch_xla


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(4 * args.steps, 16))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model = ad.to(MedianHead())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for (x,) in loader:
        loss = model(ad.to(x)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ad.step()
        done += 1
    print(json.dumps({"steps": done, "fallback_ops": ad.fallback_ops()}))


if __name__ == "__main__":
    main()
