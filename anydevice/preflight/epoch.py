"""How many items a DataLoader's epoch yields and whether its last batch is short, read from its sampler.

A static-shape target compiles the short last batch once more per epoch. The dataset's length alone is not the
epoch: ``RandomSampler(replacement=True, num_samples=N)`` yields N items, a ``DistributedSampler`` gives each rank
``ceil(len / ranks)`` (padded) or ``floor(len / ranks)`` (``drop_last=True``), and a ``BatchSampler``'s own
``drop_last`` drops the short batch. A custom batch sampler decides its own batch sizes: nothing is predicted.
"""

from __future__ import annotations

import math
from collections.abc import Sized
from typing import Any, cast

from anydevice.preflight.schema import ShortLastBatch


def short_last_batch(loader: Any, world_size: int, line: str | None) -> ShortLastBatch | None:
    """The last batch of ``loader``'s epoch when it is short (per rank of ``world_size``), else None."""
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

    batches = loader.batch_sampler
    if not isinstance(batches, BatchSampler) or type(batches).__iter__ is not BatchSampler.__iter__:
        return None  # no auto-batching, or a custom batch sampler: its batch sizes are its own
    size, sampler = batches.batch_size, batches.sampler
    if batches.drop_last or not size:
        return None
    try:
        rows = len(loader.dataset)
    except TypeError:
        rows = None  # an IterableDataset: the epoch's length is unknown
    described = None
    if isinstance(sampler, DistributedSampler) and sampler.num_replicas == 1 and world_size > 1 and rows is not None:
        # built over check's one process; the run has world_size ranks, each taking its share
        items = rows // world_size if sampler.drop_last else math.ceil(rows / world_size)
        described = f"DistributedSampler over {world_size} ranks ({'the remainder dropped' if sampler.drop_last else 'padded'})"
    else:
        try:
            items = len(cast("Sized", sampler))  # a sampler without __len__ raises TypeError, caught here
        except TypeError:
            return None  # a sampler without a length (an IterableDataset's): the epoch's end is unknown
        if isinstance(sampler, DistributedSampler):
            described = f"DistributedSampler over {sampler.num_replicas} ranks" if sampler.num_replicas > 1 else None
        elif isinstance(sampler, RandomSampler) and (sampler.replacement or items != rows):
            described = f"RandomSampler(replacement={sampler.replacement}, num_samples={items})"
        elif not isinstance(sampler, (RandomSampler, SequentialSampler)) and items != rows:
            described = f"{type(sampler).__name__} of {items} items"
    if not items % size:
        return None
    where = "BatchSampler" if loader.batch_size is None else "DataLoader"  # the script built its own BatchSampler
    return ShortLastBatch(
        rows=items, batch_size=size, last=items % size, sampler=described, fix=f"drop_last=True on the {where}", line=line
    )
