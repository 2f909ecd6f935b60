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
    row: dict[str, Any] = planned(8, 524288, budget=2, compose=False)["targets"][0]
    return row


def test_as_written_will_not_fit_by_the_compilers_answer(overflowing: dict[str, Any]) -> None:
    said = overflowing["as_written"]
    assert said["verdict"] == "will not fit" and said["evidence"] == "compiled"
    assert said["per_chip_bytes"] > said["capacity_bytes"] > 15 * 2**30


def test_batch_search_answer_fits_and_the_next_step_tried_does_not(overflowing: dict[str, Any]) -> None:
    batch = overflowing["fit"]["batch"]
    tried = dict(batch["tried"])
    assert batch["found"] is not None and tried[batch["found"]] is True
    larger = [b for b, fits in tried.items() if b > batch["found"]] + [524288]
    assert all(tried.get(b, False) is False for b in larger)  # every larger batch tried (and the script's) does not fit
    assert batch["compiles"] == len(batch["tried"]) <= 2 and batch["change"].startswith(f"per-chip batch {batch['found']}")


def test_checkpointing_is_tried_lightest_first_and_each_level_needs_less(overflowing: dict[str, Any]) -> None:
    """Measured: libtpu rematerializes on its own near the capacity (8 of these blocks at 131,072 samples fit as
    written), so at 524,288 neither level fits: blocks checkpointed need fewer bytes than as written (32.5 GB against
    34.7), every Linear checkpointed alone far more (131 GB: each keeps its own input), and the plan names no change it
    did not see fit."""
    ckpt = overflowing["fit"]["checkpointing"]
    levels = [level for level, _, _ in ckpt["tried"]]
    assert levels[0] == "blocks" and ckpt["compiles"] == len(ckpt["tried"])
    needed = [overflowing["as_written"]["per_chip_bytes"]] + [n for _, _, n in ckpt["tried"]]
    assert needed[1] < needed[0]  # the repeated blocks checkpointed: less than as written
    fitting = [level for level, fits, _ in ckpt["tried"] if fits]
    assert ckpt["level"] == (fitting[0] if fitting else None)
    assert (ckpt["change"] is None) == (not fitting)
    assert overflowing["fit"]["sharding"]["fits"] is False and overflowing["fit"]["sharding"]["change"] is None


def test_flops_and_bytes_are_the_compiled_programs(overflowing: dict[str, Any]) -> None:
    time = overflowing["time"]
    batch = overflowing["fit"]["batch"]["found"]
    assert time["configuration"]["batch"] == batch and time["evidence"] == "estimate from the compiler's counts"
    params = 8 * (2 * 1024 * 4096 + 5 * 1024) + 1024 * 8 + 8
    # forward + backward: 6 x parameters x samples; what the compiler recomputes on its own adds to it
    assert 6 * params * batch < time["flops"] < 12 * params * batch
    assert time["bytes_accessed"] > batch * 1024 * 4  # at least the input is read
    assert time["roofline_seconds"] == pytest.approx(max(time["flops"] / 197e12, time["bytes_accessed"] / 819e9))
    optimal = time["optimal_seconds"]
    assert optimal["used"] == (optimal["value"] is not None and optimal["value"] > 0 and "within 2x" in optimal["reason"])
    if optimal["value"] is not None and optimal["value"] <= 0:
        assert "ignored: negative" in optimal["reason"]


def test_composed_from_two_and_three_blocks_agrees_with_a_full_compile_of_eight() -> None:
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
