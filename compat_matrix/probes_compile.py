"""Compile probes: a training step compiled for a slice by its vendor's compiler on this host, never run.

They run only with ``anydevice matrix probe --target tpu:v5e-8`` (a slice, not a device: no chip is needed). Each
probe calls ``ad.check(model, inputs, target=<slice>, optimizer=...)`` as a user would; the step it observes on the
CPU (forward, loss, backward, the optimizer's update) is lowered and compiled for the slice by the compiler the
device's plugin declares (for tpu: libtpu via JAX AOT topologies, lowered by torchax). A probe passes when the
step compiled and the compiler says it fits; a step that does not lower, or does not fit, fails at ``compile``
with the compiler's own words. Nothing here ran on a chip: the column's evidence is "compiled".
Random-init models only, no downloads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import COMPILE_GROUP, HarnessError, Probe
from anydevice.compat_matrix.schema import Stage

Optimizer = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
Step = tuple[torch.nn.Module, tuple[torch.Tensor, ...], Optimizer, dict[str, int] | None]
"""A probe's step: ``(model, example inputs, the optimizer to build on its parameters, the mesh or None)``."""


class CompilerRefused(Exception):
    """The slice's compiler (or the lowering before it) did not take the step, or says it does not fit."""


def _adamw(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


def _sgd(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def _mlp(mesh: dict[str, int] | None = None) -> Step:
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    return model, (torch.randn(16, 64),), _adamw, mesh


def _mlp_fsdp() -> Step:
    return _mlp({"fsdp": -1})


def _convnet() -> Step:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )  # fmt: skip
    return model, (torch.randn(8, 3, 16, 16),), _sgd, None


class TinyCausalLM(torch.nn.Module):
    """Embedding, one pre-norm attention block (``scaled_dot_product_attention``, causal), an MLP and the head."""

    def __init__(self, vocab: int = 128, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        b, t, w = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.out(attended.transpose(1, 2).reshape(b, t, w))
        h = h + self.mlp(self.norm2(h))
        return torch.nn.functional.cross_entropy(self.head(h)[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def _causal_lm() -> Step:
    return TinyCausalLM(), (torch.randint(0, 128, (4, 32)),), _adamw, None


class _MaskIndex(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.linear(x)
        return h[h > 0].sum()  # a boolean-mask index: the output's size depends on the data (an implicit nonzero)


def _mask_index() -> Step:
    return _MaskIndex(), (torch.randn(8, 16),), _sgd, None


class _Float64Buffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.register_buffer("scale", torch.full((16,), 0.5, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean((self.linear(x) * self.scale.float()).pow(2))


def _float64_buffer() -> Step:
    return _Float64Buffer(), (torch.randn(8, 16),), _sgd, None


def compile_probe(build: Callable[[], Step]) -> Callable[[ProbeContext], None]:
    """The probe for one step: ``ad.check`` it for the run's slice and report the compiler's verdict."""

    def probe(ctx: ProbeContext) -> None:
        if not ctx.target:
            from anydevice.runtime.selection import example_ref

            raise HarnessError(f"a compile probe needs the run's slice (anydevice matrix probe --target {example_ref()})")
        model, inputs, optimizer, mesh = build()
        check = ctx.api("check")
        with ctx.stage(Stage.COMPILE):  # a refusal before lowering (a float64 tensor) is the compiled check's too
            report = check(model, inputs, target=ctx.target, optimizer=optimizer(list(model.parameters())), mesh=mesh)
        answer = report.targets[0].compile
        if answer is None:
            raise HarnessError(f"ad.check gave no compiled answer for {ctx.target}")
        print(_summary(answer))  # the probe's log: what the compiler said, in figures
        with ctx.stage(Stage.COMPILE):
            if not answer.ok:
                where = f" (at {answer.error_line})" if answer.error_line else ""
                raise CompilerRefused(f"{answer.compiler}: {answer.error}{where}")
            if answer.fits is False:
                # an out-of-memory refusal carries the compiler's line; a compile over the slice's capacity, the figures
                raise CompilerRefused(f"{answer.compiler}: compiled, will not fit: {answer.error or _memory(answer)}")

    return probe


def _summary(answer: Any) -> str:
    """One line of a compiled answer: slice, mesh, per-chip bytes against capacity, collectives, seconds."""
    collectives = ", ".join(f"{n} {name}" for name, n in sorted(answer.collectives.items())) or "no collectives"
    verdict = "fits" if answer.fits else "will not fit" if answer.fits is False else "no verdict"
    return (
        f"{answer.target} ({answer.topology}, {answer.counting}), mesh {answer.mesh}: {verdict}, {_memory(answer)}; "
        f"{collectives}; {answer.seconds:.1f} s ({answer.compiler})"
    )


def _memory(answer: Any) -> str:
    """The per-chip bytes against the slice's capacity, in GiB."""
    gib = 2**30
    total, capacity = answer.per_chip_bytes.get("total"), answer.capacity_bytes
    memory = f"{total / gib:.3f} GiB per chip" if total is not None else "no memory figures"
    return memory + (f" of {capacity / gib:.2f}" if capacity else "")


def _probe(name: str, build: Callable[[], Step], description: str) -> Probe:
    return Probe(f"compile_tpu_{name}", COMPILE_GROUP, compile_probe(build), {"target": "tpu"}, description)


PROBES: list[Probe] = [
    _probe("mlp_adamw", _mlp, "An MLP's training step (Linear, GELU, AdamW) compiles for the slice and fits, replicated."),
    _probe("mlp_fsdp", _mlp_fsdp, "The same MLP step with parameters and AdamW state sharded over the slice (fsdp) compiles."),
    _probe("convnet_sgd", _convnet, "A small conv net's step (Conv2d, BatchNorm, pooling, SGD with momentum) compiles."),
    _probe(
        "causal_lm",
        _causal_lm,
        "A tiny causal LM's step (embedding, LayerNorm, causal scaled_dot_product_attention, cross-entropy, AdamW).",
    ),
    _probe(
        "mask_index",
        _mask_index,
        "A boolean-mask index (h[h > 0]: data-dependent size): a static-shape compiler refuses it, naming the op and line.",
    ),
    _probe(
        "float64_buffer",
        _float64_buffer,
        "A float64 buffer: refused by name before lowering (JAX would silently compute it in float32).",
    ),
]
