"""`ad.plan` on a TPU slice: the batch, checkpointing and sharding that make a step fit, found by libtpu's compiler
on this CPU host (the tpu-check lane; no chip). Every assertion is on the compiler's own answers.

The model is wide and shallow (cheap to compile) and its activations, at a large batch, overflow a v5e chip's
15.75 GiB: each block keeps about 7 x 1024 floats per sample as compiled (2 blocks at 262,144 samples: 15.1 GB), 4 blocks
about 115 KiB; checkpointed, about 45 KiB.
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
    """196,608 samples per chip through 4 blocks: about 21 GiB of saved activations, not a v5e chip's 15.75."""
    row: dict[str, Any] = planned(4, 196608, budget=2, compose=False)["targets"][0]
    return row


def test_as_written_will_not_fit_by_the_compilers_answer(overflowing: dict[str, Any]) -> None:
    said = overflowing["as_written"]
    assert said["verdict"] == "will not fit" and said["evidence"] == "compiled"
    assert said["per_chip_bytes"] > said["capacity_bytes"] > 15 * 2**30


def test_batch_search_answer_fits_and_the_next_step_tried_does_not(overflowing: dict[str, Any]) -> None:
    batch = overflowing["fit"]["batch"]
    tried = dict(batch["tried"])
    assert batch["found"] is not None and tried[batch["found"]] is True
    larger = [b for b, fits in tried.items() if b > batch["found"]] + [196608]
    assert all(tried.get(b, False) is False for b in larger)  # every larger batch tried (and the script's) does not fit
    assert batch["compiles"] == len(batch["tried"]) <= 2 and batch["change"].startswith(f"per-chip batch {batch['found']}")


def test_checkpointing_the_blocks_turns_will_not_fit_into_fits_at_the_same_batch(overflowing: dict[str, Any]) -> None:
    ckpt = overflowing["fit"]["checkpointing"]
    assert ckpt["level"] == "blocks" and ckpt["change"] == "ad.checkpoint_blocks(model)"
    assert ckpt["tried"][0][1] is True and ckpt["tried"][0][2] < overflowing["as_written"]["capacity_bytes"]
    # the parameters are small: sharding them does not make the activations fit, and the plan says so
    assert overflowing["fit"]["sharding"]["fits"] is False and overflowing["fit"]["sharding"]["change"] is None


def test_flops_and_bytes_are_the_compiled_programs(overflowing: dict[str, Any]) -> None:
    time = overflowing["time"]
    assert time["configuration"]["checkpointing"] == "blocks" and time["evidence"] == "estimate from the compiler's counts"
    params = 4 * (2 * 1024 * 4096 + 5 * 1024) + 1024 * 8 + 8
    # forward + backward: 6 x parameters x samples; the checkpointed blocks' forward again: about 8 x
    assert 6 * params * 196608 < time["flops"] < 9 * params * 196608
    assert time["bytes_accessed"] > 196608 * 1024 * 4  # at least the input is read
    assert time["roofline_seconds"] == pytest.approx(max(time["flops"] / 197e12, time["bytes_accessed"] / 819e9))
    optimal = time["optimal_seconds"]
    assert optimal["used"] == (optimal["value"] is not None and optimal["value"] > 0 and "within 2x" in optimal["reason"])
    if optimal["value"] is not None and optimal["value"] <= 0:
        assert "ignored: negative" in optimal["reason"]


def test_composed_from_one_and_two_blocks_agrees_with_a_full_compile_of_eight() -> None:
    """8 blocks at 16,384 samples a chip: the composed per-chip bytes and flops within 10% of the full compile's."""
    full = planned(8, 16384, budget=0, compose=False)["targets"][0]
    composed = planned(8, 16384, budget=0, compose=True)["targets"][0]
    assert composed["as_written"]["evidence"] == "composed from compiled parts (estimate)"
    assert composed["as_written"]["compiles"] == 2 and full["as_written"]["compiles"] == 1
    assert composed["as_written"]["verdict"] == full["as_written"]["verdict"] == "fits"
    assert composed["as_written"]["per_chip_bytes"] == pytest.approx(full["as_written"]["per_chip_bytes"], rel=0.10)
    assert composed["time"]["flops"] == pytest.approx(full["time"]["flops"], rel=0.10)
    assert composed["time"]["bytes_accessed"] == pytest.approx(full["time"]["bytes_accessed"], rel=0.10)
