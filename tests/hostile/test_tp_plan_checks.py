"""Issue 46: ``parallelize`` refuses, up front and by name, a plan whose attention heads do not split over tp and a
``colwise`` feeding a ``colwise``: before, both passed the checks and died inside torch (a view, a DTensor shape).

The models are written as users write them (a head count but no ``head_dim``; an MLP of three Linears), and the
checks run as the DTensor lowering runs them before any process group exists (``Lowering.check``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anydevice.errors import DistributedError
from anydevice.shims.tp_dtensor import DTensorParallel


class Attention(nn.Module):
    def __init__(self, dim: int = 12, n_heads: int = 3) -> None:
        super().__init__()
        self.n_heads = n_heads  # no head_dim: the head size is dim // n_heads, as nanoGPT-style code has it
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.cache: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (p(x).view(b, t, self.n_heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        self.cache = k  # a forward that stores on self: the check's trace must leave no trace of its own
        y = torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, n_heads: int = 3) -> None:
        super().__init__()
        self.attn = Attention(n_heads=n_heads)
        self.up, self.mid, self.down = nn.Linear(12, 24), nn.Linear(24, 24), nn.Linear(24, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.down(torch.relu(self.mid(torch.relu(self.up(x)))))


ATTENTION = {"attn.q": "colwise", "attn.k": "colwise", "attn.v": "colwise", "attn.o": "rowwise"}


def check(model: nn.Module, plan: dict[str, str], tp: int = 2) -> None:
    lowering = DTensorParallel("cpu")
    lowering.check(model, lowering.expand(model, plan), {"tp": tp})


def test_heads_that_do_not_split_over_tp_are_refused_by_name_without_a_head_dim() -> None:
    with pytest.raises(DistributedError) as caught:
        check(Block(n_heads=3), {**ATTENTION, "up": "colwise", "down": "rowwise"})
    message = str(caught.value)
    assert "attn.q (colwise) holds 3 attention heads of size 4 (12 features)" in message, message
    assert "tensor-parallel degree 2" in message and "Choose a tp degree that divides 3" in message


def test_a_colwise_feeding_a_colwise_is_refused_naming_both_and_the_fix() -> None:
    with pytest.raises(DistributedError) as caught:
        check(Block(n_heads=4), {**ATTENTION, "up": "colwise", "mid": "colwise", "down": "rowwise"})
    message = str(caught.value)
    assert "makes up 'colwise' (from 'up') and mid 'colwise' (from 'mid'), but up's output feeds mid" in message, message
    assert "Make mid 'rowwise'" in message and "'colwise_rep'" in message


def test_a_sound_plan_passes_and_the_trace_leaves_the_model_as_it_was() -> None:
    model = Block(n_heads=4)
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    modules = dict(model.named_modules())
    check(model, {**ATTENTION, "up": "colwise", "mid": "rowwise"})  # attention's q/k/v meet in matmuls, then o
    assert model.attn.cache is None and dict(model.named_modules()) == modules
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())
    out = model(torch.randn(2, 5, 12))  # and it still runs as written
    assert out.shape == (2, 5, 12) and model.attn.cache is not None


def test_a_block_that_does_not_trace_is_left_to_the_other_checks() -> None:
    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
                x = x * 2
            out: torch.Tensor = self.b(self.a(x))
            return out

    check(nn.Sequential(Gated()), {"0.a": "colwise", "0.b": "rowwise"})
