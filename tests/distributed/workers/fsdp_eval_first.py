"""Worker: an evaluation forward (no_grad) before training, under wrap(model, "fsdp"), against the unwrapped run.

argv: ROOT_RESHARD... (default | keep), each run in turn in the same process group on a fresh copy of the
model. ``keep`` passes reshard_after_forward=False (FSDP2's own default for a root) to show what the default
of ``wrap`` guards against. Prints one JSON line per rank and ROOT_RESHARD: both runs' losses.
"""

from __future__ import annotations

import copy
import json
import sys

import torch

import anydevice as ad
from anydevice.compat_matrix.parallel_job import TinyLM, _batches, _loss


def train(model: torch.nn.Module, feed: object) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for idx in _batches():
        loss = _loss(model, feed(idx))  # type: ignore[operator]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def run(root: str) -> None:
    options = {"reshard_after_forward": False} if root == "keep" else {}
    torch.manual_seed(0)
    reference = TinyLM()
    model = ad.distributed.wrap(copy.deepcopy(reference), "fsdp", **options)
    rank, world = ad.distributed.rank(), ad.distributed.world_size()

    def mine(batch: torch.Tensor) -> torch.Tensor:
        return batch.chunk(world)[rank]

    with torch.no_grad():
        model(mine(_batches()[0]))
    losses = ad.distributed.all_reduce(torch.tensor(train(model, mine)), "sum") / world
    row = {"root": root, "rank": rank, "losses": losses.tolist(), "reference": train(reference, lambda b: b)}
    print(json.dumps(row), flush=True)
    del model


def main() -> None:
    for root in sys.argv[1:]:
        run(root)
    ad.distributed.shutdown()


if __name__ == "__main__":
    main()
