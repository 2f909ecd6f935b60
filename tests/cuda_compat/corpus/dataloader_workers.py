"""A DataLoader with 2 worker processes, shuffling with a seeded generator and random per-item augmentation."""

import _digest
import torch
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((4,), float(i)) + torch.randn(4) * 0.01  # drawn from the worker's own seeded generator


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(Noisy(), batch_size=5, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(3))
    for epoch in range(2):
        _digest.record(f"epoch{epoch}", list(loader))
    _digest.done()
