"""The text shipped in the repo as training data: byte windows and a deterministic, rank-sharded loader.

Shared by the main job (examples/train.py) and the benchmarks' workload (benchmarks/workload.py).
Raw torch only: no anydevice import.
"""

from __future__ import annotations

from pathlib import Path

import torch

CORPUS = Path(__file__).resolve().parent / "data" / "corpus.txt"
VOCAB = 256  # bytes: the corpus's token ids

_DATA: dict[Path, torch.Tensor] = {}


class Windows(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every (input, next-byte target) window of ``seq_len`` bytes of the corpus."""

    def __init__(self, data: torch.Tensor, seq_len: int) -> None:
        self.data, self.seq_len = data, seq_len

    def __len__(self) -> int:
        return len(self.data) - self.seq_len - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[i : i + self.seq_len + 1]
        return chunk[:-1], chunk[1:]


def corpus_bytes(path: Path = CORPUS) -> torch.Tensor:
    """The corpus as a 1-D tensor of byte values (read once per process)."""
    if path not in _DATA:
        _DATA[path] = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).long()
    return _DATA[path]


def batches(
    steps: int, batch_size: int, seq_len: int, seed: int = 0, rank: int = 0, world: int = 1
) -> torch.utils.data.DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches of random windows for ``rank`` of ``world``: every rank draws the same
    ``steps * batch_size * world`` windows from ``seed`` and takes its own share."""
    dataset = Windows(corpus_bytes(), seq_len)
    generator = torch.Generator().manual_seed(seed)
    total = steps * batch_size * world
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=total, generator=generator)
    indices = list(sampler)[rank::world]
    return torch.utils.data.DataLoader(torch.utils.data.Subset(dataset, indices), batch_size=batch_size, drop_last=True)
