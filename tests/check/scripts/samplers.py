"""Loaders whose epoch is set by the sampler, not the dataset's length (`samplers.py CASE`): check's recompile
prediction reads the sampler. 100 rows, batches of 8: the dataset alone would leave a last batch of 4."""

import sys

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, Sampler, TensorDataset

case = sys.argv[1]
dataset = TensorDataset(torch.randn(100, 16), torch.randint(0, 4, (100,)))


class Buckets(Sampler[list[int]]):
    """A custom batch sampler: batches of 8, then one of 4 (its sizes are its own)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter([list(range(i, min(i + 8, 100))) for i in range(0, 100, 8)])

    def __len__(self) -> int:
        return 13


if case == "replacement":  # 96 draws: 12 full batches
    loader = DataLoader(dataset, batch_size=8, sampler=RandomSampler(dataset, replacement=True, num_samples=96))
elif case == "replacement_short":  # 90 draws: a last batch of 2
    loader = DataLoader(dataset, batch_size=8, sampler=RandomSampler(dataset, replacement=True, num_samples=90))
elif case == "distributed":  # 4 ranks given: each takes 25 rows, a last batch of 1
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=4, rank=0))
elif case == "distributed_full":  # 5 ranks given: 20 rows each, a last batch of 4
    loader = DataLoader(dataset, batch_size=5, sampler=DistributedSampler(dataset, num_replicas=5, rank=0))
elif case == "batch_sampler":  # the script's own BatchSampler drops the short batch
    loader = DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), batch_size=8, drop_last=True))
elif case == "batch_sampler_short":  # its own BatchSampler keeps it: the fix is on the BatchSampler
    loader = DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), batch_size=8, drop_last=False))
elif case == "custom":  # a batch sampler of its own: its sizes are not predicted
    loader = DataLoader(dataset, batch_sampler=Buckets())
else:  # the plain case: 100 rows in batches of 8
    loader = DataLoader(dataset, batch_size=8, shuffle=True)

model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:  # CHECK: loop
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
