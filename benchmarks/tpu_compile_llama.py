"""A Llama-3-8B-shaped model on the meta device, checked for TPU slices by libtpu's compiler on this host.

    python benchmarks/tpu_compile_llama.py [--targets tpu:v5e-8,tpu:v5p-8] [--layers 32] [--seq 2048] [--mesh fsdp=-1]

Nothing is materialized: the model is built on meta and `ad.check` compiles one AdamW training step per
slice (fsdp over the slice). Prints one JSON line per target: verdict, compile seconds, per-chip bytes,
the compiler's capacity, and this process's peak RSS (the number the benchmark is about: under 12 GB).
Needs the tpu-check lane (`scripts/venv tpu-check`). The model is written here (RMSNorm, grouped-query
attention with rotary embeddings, SwiGLU), shaped like Llama 3 8B: 32 layers, d 4096, 32 heads, 8 KV heads,
MLP 14336, vocabulary 128256 (8.03B parameters).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch
import torch.nn.functional as F
from torch import nn

import anydevice as ad


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o(a)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(
        self,
        layers: int = 32,
        d: int = 4096,
        heads: int = 32,
        kv_heads: int = 8,
        hidden: int = 14336,
        vocab: int = 128256,
        seq: int = 2048,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        head_dim = d // heads
        freqs = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq).float(), freqs)
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin(), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        t = tokens.shape[1]
        for block in self.blocks:
            x = block(x, self.cos[:t], self.sin[:t])
        return self.head(self.norm(x))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="tpu:v5e-8,tpu:v5p-8")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--mesh", default="fsdp=-1")
    parser.add_argument(
        "--quick-schedule",
        action="store_true",
        help="JAX's exec_time_optimization_effort=-1 (the report says so): ~6x faster compiles of deep models here; "
        "per-chip bytes within ~5%% of the default schedule on a 1-layer sample",
    )
    a = parser.parse_args()
    if a.quick_schedule:
        import jax

        jax.config.update("jax_exec_time_optimization_effort", -1.0)
    mesh = {k: int(v) for k, v in (p.split("=") for p in a.mesh.split(","))}
    with torch.device("meta"):
        model = Llama(layers=a.layers, seq=a.seq).to(torch.bfloat16)
        tokens = torch.zeros(a.batch, a.seq, dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    params = sum(p.numel() for p in model.parameters())
    for target in a.targets.split(","):
        started = time.perf_counter()
        report = ad.check(model, tokens, target=target, optimizer=optimizer, mesh=mesh)
        t = report.targets[0]
        step = t.compile
        print(
            json.dumps(
                {
                    "target": target,
                    "parameters": params,
                    "layers": a.layers,
                    "seq": a.seq,
                    "mesh": step.mesh if step else mesh,
                    "verdict": t.verdict,
                    "compile_seconds": step.seconds if step else None,
                    "check_seconds": round(time.perf_counter() - started, 1),
                    "per_chip_gib": round(step.per_chip_bytes.get("total", 0) / 2**30, 2) if step else None,
                    "required_gib": round(step.required_bytes / 2**30, 2) if step and step.required_bytes else None,
                    "capacity_gib": round(step.capacity_bytes / 2**30, 2) if step and step.capacity_bytes else None,
                    "collectives": step.collectives if step else None,
                    "error": step.error if step else None,
                    "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                    "compiler": step.compiler if step else None,
                    "assumptions": step.assumptions[4:] if step else None,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
