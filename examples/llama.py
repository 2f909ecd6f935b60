"""The main job's model family: a Llama-style decoder and its size presets.

RMSNorm before each sub-layer, rotary position embeddings (the rotate-half form, real arithmetic
only, so it runs on devices without complex numbers), SwiGLU MLPs and grouped-query attention
(``n_kv_heads`` key/value heads shared by groups of query heads). Plain torch: it runs wherever
anydevice places it.

Presets (``PRESETS``), each a ``LlamaConfig`` plus training defaults:

- ``tiny``: 0.2M parameters over the 256 byte values; the CPU-friendly default that CI trains.
- ``125m``: GPT-3-small scale with Llama-3 ratios (4 key/value heads per 12 query heads).
- ``1b``: the Llama-3.2-1B layer shape (2048 wide, 16 layers, 32/8 heads) with a 32k vocab and
  untied embeddings (tied ones cannot be sharded as separate FSDP units); ``d_ff`` 7168.
- ``8b``: the Llama-3-8B shape (4096 wide, 32 layers, 32/8 heads, ``d_ff`` 14336, 128256 vocab).

The larger presets are for accelerators; their vocabularies are larger than the byte data uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama-style decoder."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    seq_len: int  # the longest context the rotary tables cover
    rope_theta: float = 500_000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def problems(self) -> list[str]:
        """What makes this shape unbuildable, one sentence each (empty when it is fine)."""
        found = [f"{name} must be at least 1 (got {value})" for name, value in self._sizes() if value < 1]
        if found:
            return found
        if self.d_model % self.n_heads:
            found.append(f"d_model {self.d_model} is not divisible by {self.n_heads} heads")
        elif self.head_dim % 2:
            found.append(f"the head size d_model/heads = {self.head_dim} must be even for rotary embeddings")
        if self.n_heads % self.n_kv_heads:
            found.append(f"{self.n_heads} query heads cannot be grouped over {self.n_kv_heads} key/value heads")
        return found

    def _sizes(self) -> list[tuple[str, int]]:
        names = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seq_len")
        return [(name, int(getattr(self, name))) for name in names]

    def flops_config(self) -> dict[str, int | str]:
        """The fields ``anydevice.meter.flops_per_token_from_config`` reads."""
        return {
            "num_hidden_layers": self.n_layers,
            "hidden_size": self.d_model,
            "vocab_size": self.vocab_size,
            "intermediate_size": self.d_ff,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "hidden_act": "silu",
            "max_position_embeddings": self.seq_len,
        }


@dataclass(frozen=True)
class Preset:
    """A model shape with the training defaults that suit it."""

    config: LlamaConfig
    batch_size: int
    lr: float
    nominal_params: float | None  # what the name says (None: tiny has no size in its name)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(LlamaConfig(256, 128, 2, 4, 2, 384, 64, rope_theta=10_000.0), batch_size=16, lr=3e-3, nominal_params=None),
    "125m": Preset(LlamaConfig(32_000, 768, 12, 12, 4, 2048, 1024), batch_size=16, lr=6e-4, nominal_params=125e6),
    "1b": Preset(LlamaConfig(32_000, 2048, 16, 32, 8, 7168, 2048), batch_size=8, lr=3e-4, nominal_params=1e9),
    "8b": Preset(LlamaConfig(128_256, 4096, 32, 32, 8, 14_336, 4096), batch_size=1, lr=1.5e-4, nominal_params=8e9),
}


def rotary_tables(config: LlamaConfig, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotation angles, ``[seq_len, head_dim]`` in float32 (rotate-half layout)."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, half, device=device, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(config.seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (``[batch, heads, time, head_dim]``) by each position's angles."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary embeddings."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.wq = nn.Linear(config.d_model, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.d_model, config.n_kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.d_model, config.n_kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # heads as -1: under tensor parallelism (DTensor) this rank holds n_heads / tp of them
        q = self.wq(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.n_kv_heads != self.n_heads:  # share each key/value head with its group of query heads
            k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
            v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        projected: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, t, -1))
        return projected


class SwiGLU(nn.Module):
    """The gated MLP: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.w3 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.w2 = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module):
    """Pre-norm decoder block: attention then the MLP, each with a residual."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.attention = Attention(config)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class Llama(nn.Module):
    """A Llama-style decoder; ``forward(idx, targets)`` returns the mean next-token cross-entropy."""

    tp_plan: ClassVar[dict[str, str]] = {
        "blocks.*.attention.wq": "colwise",
        "blocks.*.attention.wk": "colwise",
        "blocks.*.attention.wv": "colwise",
        "blocks.*.attention.wo": "rowwise",
        "blocks.*.mlp.w1": "colwise",
        "blocks.*.mlp.w3": "colwise",
        "blocks.*.mlp.w2": "rowwise",
    }
    """Its tensor-parallel plan (``ad.distributed.parallelize(model, plan="auto")``): heads and MLP width split."""

    cos: torch.Tensor  # rotary tables, buffers derived from the config
    sin: torch.Tensor

    def __init__(self, config: LlamaConfig, activation_checkpointing: bool = False) -> None:
        super().__init__()
        problems = config.problems()
        if problems:
            raise ValueError(f"This model shape cannot be built: {'; '.join(problems)}.")
        self.config = config
        self.activation_checkpointing = activation_checkpointing
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = rotary_tables(config, self.output.weight.device)
        self.register_buffer("cos", cos, persistent=False)  # derived from the config: not saved in checkpoints
        self.register_buffer("sin", sin, persistent=False)
        if self.output.weight.device.type != "meta":
            self.init_weights()

    def init_weights(self) -> None:
        """torchtitan's Llama initialisation: unit-normal embeddings, Normal(0, 0.02) block weights with the
        residual projections scaled by depth, Normal(0, d_model**-0.5) output head, unit norms; fresh rotary tables."""
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, nn.Embedding):
                    nn.init.normal_(module.weight)
                elif isinstance(module, nn.Linear):
                    if name == "output":
                        std = self.config.d_model**-0.5
                    elif name.endswith(("attention.wo", "mlp.w2")):
                        std = 0.02 / math.sqrt(2 * self.config.n_layers)
                    else:
                        std = 0.02
                    nn.init.normal_(module.weight, mean=0.0, std=std)
                elif isinstance(module, nn.RMSNorm):
                    module.reset_parameters()
            cos, sin = rotary_tables(self.config, self.cos.device)
            self.cos.copy_(cos)
            self.sin.copy_(sin)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.logits(idx)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits, ``[batch, time, vocab_size]``."""
        t = idx.shape[1]
        if t > self.config.seq_len:
            raise ValueError(f"A sequence of {t} tokens is longer than the model's context ({self.config.seq_len}).")
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.embed(idx)
        for block in self.blocks:
            if self.activation_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x = block(x, cos, sin)
        out: torch.Tensor = self.output(self.norm(x))
        return out

    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: every Linear weight (attention, MLP, output head)."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))


class Logits(nn.Module):
    """The decoder as an inference module, ``forward(idx) -> logits``: what ``ad.export`` converts for devices."""

    def __init__(self, model: Llama) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.logits(idx)


def build_config(preset: str, **overrides: int | None) -> LlamaConfig:
    """The preset's config with the given fields replaced (``None`` keeps the preset's value).

    Overriding ``d_model`` without ``d_ff`` keeps the preset's MLP ratio; overriding ``n_heads``
    without ``n_kv_heads`` keeps the preset's key/value heads when they divide the new count,
    otherwise uses one key/value head per query head.
    """
    base = PRESETS[preset].config
    given = {k: v for k, v in overrides.items() if v is not None}
    if "d_model" in given and "d_ff" not in given:
        given["d_ff"] = max(1, round(base.d_ff * given["d_model"] / base.d_model))
    if "n_heads" in given and "n_kv_heads" not in given:
        given["n_kv_heads"] = base.n_kv_heads if given["n_heads"] % base.n_kv_heads == 0 else given["n_heads"]
    return replace(base, **given)


def count_params(config: LlamaConfig) -> int:
    """Every parameter of the model ``config`` describes, counted on the meta device (no memory used)."""
    with torch.device("meta"):
        model = Llama(config)
    return sum(p.numel() for p in model.parameters())
