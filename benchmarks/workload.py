"""The workload every per-step benchmark times: a small byte-level GPT on the repo's corpus.

A copy of the main job's original model (examples/train.py), kept here so the benchmarks measure
the same thing while the main job's model presets change; the data is the main job's own
(examples/corpus.py). Raw torch only: no anydevice import.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import corpus  # examples/corpus.py

VOCAB = corpus.VOCAB


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention then an MLP."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A byte-level decoder-only transformer (2 layers, 128 wide by default)."""

    def __init__(self, d_model: int = 128, n_layers: int = 2, n_heads: int = 4, seq_len: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def batches(steps: int, batch_size: int = 16, seq_len: int = 64, seed: int = 0, rank: int = 0, world: int = 1) -> Any:
    """A DataLoader of ``steps`` random windows per rank: the main job's data (examples/corpus.py)."""
    return corpus.batches(steps, batch_size, seq_len, seed, rank, world)


def new_model(seed: int = 0) -> tuple[TinyGPT, torch.optim.Optimizer]:
    """A freshly seeded model and its AdamW optimizer (identical for every variant)."""
    torch.manual_seed(seed)
    model = TinyGPT()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3)
