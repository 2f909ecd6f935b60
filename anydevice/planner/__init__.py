""" "What fits, how fast, at what cost": ``anydevice plan`` and ``ad.plan()`` (docs/plan.md).

For each target one row: the verdict of the step as written, what makes it fit (the largest per-chip batch, the
lightest activation checkpointing, fully sharded state), found by compiling on a TPU slice (libtpu, no chip) and
by the CPU estimate elsewhere; the step's time from the compiled program's counts over the catalogue's peaks;
and its cost from a declared price. Every number says what stands behind it. Imports torch only when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from anydevice.planner.blocks import checkpoint_blocks

__all__ = ["checkpoint_blocks", "plan"]


def plan(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    target: str | list[str],
    optimizer: torch.optim.Optimizer | None = None,
    mesh: dict[str, int] | None = None,
    price: dict[str, float] | str | None = None,
    compose: bool | None = None,
    budget: int = 8,
) -> dict[str, Any]:
    """Plan ``model``'s training step (forward, summed-output loss, backward, ``optimizer``'s update) per target.

    ``target``: ``"tpu:v5e-8,tpu:v5p-8,cuda:h100x8"`` (slices are compiled; other targets are CPU estimates).
    ``compose``: compile 1 and 2 repeated blocks and compose the model's N (default: when it has 8 or more).
    ``budget``: compiled variants the batch search may try per target. ``price``: USD per chip-hour overrides
    (``{"v5e": 1.2}`` or ``"tpu-v5e=1.2"``). Returns ``{"targets": [row, ...], "cheapest": ..., ...}`` (docs/plan.md).
    """
    from anydevice.planner.rows import plan_rows

    return plan_rows(
        model, example_inputs, target=target, optimizer=optimizer, mesh=mesh, price=price, compose=compose, budget=budget
    )
