"""Tied weights stay tied through ad.to's module move (issue 35), checked where torch itself unties.

A move to the meta device makes new Parameters exactly as torch_xla's does (incompatible tensor kinds),
so the main lane proves the mechanism; tests/xla/test_tied_weights_xla.py proves it on xla with training.
"""

from __future__ import annotations

import torch
from torch import nn

from anydevice.shims.common import move
from anydevice.shims.tied import tied_groups


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(8))


def test_plain_torch_unties_where_the_tensor_kind_changes() -> None:
    model = TiedLM().to("meta")
    assert model.head.weight is not model.embed.weight  # what ad.to used to inherit


def test_move_keeps_the_tie_and_every_parameter_and_buffer_object() -> None:
    model = TiedLM()
    weight, scale = model.embed.weight, model.scale
    assert [[o.path for o in g] for g in tied_groups(model)] == [["embed.weight", "head.weight"]]
    moved = move({"model": model}, torch.device("meta"))["model"]
    assert moved is model and model.embed.weight is weight and model.head.weight is weight
    assert model.scale is scale and weight.is_meta and scale.is_meta


def test_move_to_the_same_kind_is_torchs_own_move() -> None:
    model = TiedLM()
    weight = model.embed.weight
    move(model, torch.device("cpu"))
    assert model.head.weight is weight and model.embed.weight is weight
