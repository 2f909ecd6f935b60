"""`ad.plan` on a TPU slice: the batch, checkpointing and sharding that make a step fit, found by libtpu's compiler
on this CPU host (the tpu-check lane; no chip). Every assertion is on the compiler's own answers.

The model is wide and shallow (cheap to compile) and its activations, at a large batch, overflow a v5e chip's
15.75 GiB. Measured here: libtpu fits more than a naive count of saved tensors (4 blocks at 196,608 samples fit), and
checkpointing 4 blocks at 524,288 samples only takes 26.0 GB to 23.8 GB (one block's recompute is large): the fixture
uses 8 blocks, where the saved block inputs are small beside the activations kept without checkpointing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import anydevice as ad

pytestmark = [pytest.mark.tpu_compile, pytest.mark.slow]


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self, width: int = 1024, depth: int = 4) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def planned(depth: int, batch: int, **kwargs: Any) -> dict[str, Any]:
    with torch.device("meta"):
        model = Net(1024, depth)
    x = torch.empty(batch, 1024, device="meta")
    result: dict[str, Any] = ad.plan(
        model, x, target="tpu:v5e-8", optimizer=torch.optim.SGD(model.parameters(), lr=0.1), **kwargs
    )
    return result


@pytest.fixture(scope="module")
def overflowing() -> dict[str, Any]:
    """131,072 samples per chip through 8 blocks: about 26 GB as written (8 blocks at 16,384 compile to 3.27 GB), not a
    v5e chip's 15.75 GiB; with each block checkpointed, about 9 GB."""
    row: dict[str, Any] = planned(8, 131072, budget=1, compose=False)["targets"][0]
    return row


def test_as_written_will_not_fit_by_the_compilers_answer(overflowing: dict[str, Any]) -> None:
    said = overflowing["as_written"]
    assert said["verdict"] == "will not fit" and said["evidence"] == "compiled"
    assert said["per_chip_bytes"] > said["capacity_bytes"] > 15 * 2**30


def test_batch_search_answer_fits_and_the_next_step_tried_does_not(overflowing: dict[str, Any]) -> None:
    batch = overflowing["fit"]["batch"]
    tried = dict(batch["tried"])
    assert batch["found"] is not None and tried[batch["found"]] is True
    larger = [b for b, fits in tried.items() if b > batch["found"]] + [131072]
    assert all(tried.get(b, False) is False for b in larger)  # every larger batch tried (and the script's) does not fit
    assert batch["compiles"] == len(batch["tried"]) <= 1 and batch["change"].startswith(f"per-chip batch {batch['found']}")


def test_checkpointing_the_blocks_turns_will_not_fit_into_fits_at_the_same_batch(overflowing: dict[str, Any]) -> None:
    ckpt = overflowing["fit"]["checkpointing"]
    assert ckpt["level"] == "blocks" and ckpt["change"] == "ad.checkpoint_blocks(model)"
    assert ckpt["tried"][0][1] is True and ckpt["tried"][0][2] < overflowing["as_written"]["capacity_bytes"]
    # the parameters are small: sharding them does not make the activations fit, and the plan says so
    assert overflowing["fit"]["sharding"]["fits"] is False and overflowing["fit"]["sharding"]["change"] is None


def test_flops_and_bytes_are_the_compiled_programs(overflowing: dict[str, Any]) -> None:
    time = overflowing["time"]
    assert time["configuration"]["checkpointing"] == "blocks" and time["evidence"] == "estimate from the compiler's counts"
    params = 8 * (2 * 1024 * 4096 + 5 * 1024) + 1024 * 8 + 8
    # forward + backward: 6 x parameters x samples; the checkpointed blocks' forward again: about 8 x
    assert 6 * params * 131072 < time["flops"] < 9 * params * 131072
    assert time["bytes_accessed"] > 131072 * 1024 * 4  # at least the input is read
    assert time["roofline_seconds"] == pytest.approx(max(time["flops"] / 197e12, time["bytes_accessed"] / 819e9))
    optimal = time["optimal_seconds"]
    assert optimal["used"] == (optimal["value"] is not None and optimal["value"] > 0 and "within 2x" in optimal["reason"])
    if optimal["value"] is not None and optimal["value"] <= 0:
        assert "ignored: negative" in optimal["reason"]


def test_composed_from_one_and_two_blocks_agrees_with_a_full_compile_of_eight() -> None:
    """8 blocks at 16,384 samples a chip: composed from 2 and 3 blocks, the per-chip bytes and flops within 10% of the
    full compile's (measured: 3,273,545,728 bytes against 3,274,916,352; from 1 and 2 blocks it was 19% over)."""
    full = planned(8, 16384, budget=0, compose=False)["targets"][0]
    composed = planned(8, 16384, budget=0, compose=True)["targets"][0]
    assert composed["as_written"]["evidence"] == "composed from compiled parts (estimate)"
    assert composed["as_written"]["compiles"] == 2 and full["as_written"]["compiles"] == 1
    assert composed["as_written"]["verdict"] == full["as_written"]["verdict"] == "fits"
    assert composed["as_written"]["per_chip_bytes"] == pytest.approx(full["as_written"]["per_chip_bytes"], rel=0.10)
    assert composed["time"]["flops"] == pytest.approx(full["time"]["flops"], rel=0.10)
    assert composed["time"]["bytes_accessed"] == pytest.approx(full["time"]["bytes_accessed"], rel=0.10)
