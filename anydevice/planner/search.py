"""What makes the step fit on one TPU slice, found by compiling it (libtpu through ``anydevice.shims.tpu_aot``).

One :class:`Compiler` holds the observed step (model, inputs, optimizer, loss) and compiles variants of it: another
per-chip batch (the batch dimension of every input scaled), another checkpointing level, another mesh. With
``compose`` it compiles the model with k and with k + 1 of its repeated blocks (k = 2 for a model of 4 or more: the
1-block program differs, measured 19% over a full 8-block compile composed from 1 and 2, 0.04% from 2 and 3) and
composes N blocks linearly (per-chip bytes, flops, bytes accessed): "composed from compiled parts (estimate)".
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from anydevice.planner.blocks import Level, blocks_kept, checkpoint_blocks

COMPOSED = "composed from compiled parts (estimate)"
COMPILED = "compiled"


@dataclass
class Outcome:
    """One variant's answer: fits (True/False/None unknown), per-chip bytes, the program's counts, and how it was got."""

    batch: int
    level: Level
    mesh: dict[str, int]
    fits: bool | None
    per_chip_bytes: int | None
    capacity_bytes: int | None
    evidence: str
    compiles: int
    seconds: float
    cost: dict[str, float] = field(default_factory=dict)
    collective_bytes: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


class Compiler:
    """Compiles variants of one observed step for one slice, counting compiles."""

    def __init__(
        self,
        model: Any,
        args: tuple[Any, ...],
        optimizer: Any,
        slice_name: str,
        loss: Any = None,
        *,
        device: str,
        compose: bool = False,
        compose_from: int = 1,
    ) -> None:
        self.model, self.args, self.optimizer, self.slice_name, self.loss = model, args, optimizer, slice_name, loss
        self.device = device
        """The device whose plugin's slice compiler compiles (``CheckFacts.slice_compiler``, called through the guard)."""
        self.compose = compose
        self.compose_from = compose_from
        """Compose N blocks from compiles of this many and one more (default 1 and 2)."""
        self.batch = script_batch(args)
        self.compiles = 0
        self._models: dict[Level, Any] = {"none": model}

    def model_at(self, level: Level) -> Any:
        if level not in self._models:
            self._models[level] = checkpoint_blocks(copy.deepcopy(self.model), level)
        return self._models[level]

    def outcome(self, batch: int, level: Level, mesh: Mapping[str, int] | None) -> Outcome:
        started = time.perf_counter()
        model = self.model_at(level)
        if not self.compose:
            raw = self._compile(model, batch, mesh)
            return _outcome(raw, batch, level, COMPILED, 1, time.perf_counter() - started)
        first = self.compose_from
        with blocks_kept(model, first) as depth:
            one = self._compile(model, batch, mesh)
        with blocks_kept(model, first + 1):
            two = self._compile(model, batch, mesh)
        out = _outcome(two, batch, level, COMPOSED, 2, time.perf_counter() - started)
        a, b, more = _total(one), _total(two), depth - first
        out.per_chip_bytes = None if a is None or b is None else a + more * (b - a)
        out.cost = {
            k: one["cost"][k] + more * (two["cost"][k] - one["cost"][k]) for k in two.get("cost", {}) if k in one.get("cost", {})
        }
        out.cost.pop("optimal_seconds", None)  # a time the compiler gave for a truncated model: not composed
        out.collective_bytes = {
            k: one.get("collective_bytes", {}).get(k, 0) + more * (v - one.get("collective_bytes", {}).get(k, 0))
            for k, v in two.get("collective_bytes", {}).items()
        }
        capacity = two.get("capacity_bytes") or one.get("capacity_bytes")
        out.capacity_bytes = capacity
        both_compiled = one.get("ok") or one.get("fits") is False
        if out.per_chip_bytes is not None and capacity and both_compiled:
            out.fits, out.error = out.per_chip_bytes <= capacity, None
        out.raw = {"first": one, "second": two, "from_blocks": first, "blocks": depth}
        return out

    def _compile(self, model: Any, batch: int, mesh: Mapping[str, int] | None) -> dict[str, Any]:
        from anydevice.preflight.compiled import require_compiler, slice_compiler

        require_compiler([f"{self.device}:{self.slice_name}"])  # a device without a slice compiler: its clear refusal
        compiler = slice_compiler(self.device)
        assert compiler is not None
        self.compiles += 1
        result: dict[str, Any] = compiler.compile_step(
            model,
            scaled(self.args, self.batch, batch),
            {},
            optimizer=self.optimizer,
            target=self.slice_name,
            mesh=mesh,
            loss=self.loss,
            costs=True,
        )
        return result


def _total(raw: dict[str, Any]) -> int | None:
    if raw.get("ok"):
        total: int = raw["per_chip_bytes"]["total"]
        return total
    needed: int | None = raw.get("required_bytes")
    return needed


def _outcome(raw: dict[str, Any], batch: int, level: Level, evidence: str, compiles: int, seconds: float) -> Outcome:
    return Outcome(
        batch=batch,
        level=level,
        mesh=dict(raw.get("mesh", {})),
        fits=raw.get("fits"),
        per_chip_bytes=_total(raw),
        capacity_bytes=raw.get("capacity_bytes"),
        evidence=evidence,
        compiles=compiles,
        seconds=round(seconds, 2),
        cost=dict(raw.get("cost", {})),
        collective_bytes=dict(raw.get("collective_bytes", {})),
        error=None if raw.get("ok") or raw.get("fits") is False else raw.get("error"),
        raw=raw,
    )


def script_batch(args: tuple[Any, ...]) -> int:
    """The batch of the observed inputs: the first dimension of the first tensor (1 when there is none)."""
    import torch
    from torch.utils._pytree import tree_leaves

    first = next((t for t in tree_leaves(args) if isinstance(t, torch.Tensor) and t.dim() > 0), None)
    return int(first.shape[0]) if first is not None else 1


def scaled(args: tuple[Any, ...], batch: int, to: int) -> tuple[Any, ...]:
    """``args`` with every tensor whose first dimension is the batch given ``to`` rows instead (shapes only: on meta)."""
    import torch
    from torch.utils._pytree import tree_map

    if to == batch:
        return args

    def one(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] == batch:
            return torch.empty((to, *t.shape[1:]), dtype=t.dtype, device="meta")
        return t

    out: tuple[Any, ...] = tree_map(one, args)
    return out


@dataclass
class Search:
    """A bounded search's answer: the value found, the outcomes tried, compiles and seconds."""

    found: Any
    tried: list[Outcome]
    compiles: int
    seconds: float
    change: str | None = None
    note: str | None = None


def largest_batch(compiler: Compiler, first: Outcome, mesh: Mapping[str, int] | None, budget: int = 8) -> Search:
    """The largest per-chip batch that fits at the script's checkpointing and mesh: doubling (or halving) from the
    script's batch until the answer changes, then bisection; at most ``budget`` compiled variants."""
    started, before = time.perf_counter(), compiler.compiles
    tried: list[Outcome] = []
    fits_at: int | None = first.batch if first.fits else None
    fails_at: int | None = first.batch if first.fits is False else None
    if first.fits is None:
        return Search(None, [], 0, 0.0, note="unknown: the script as written did not compile to an answer")

    def probe(b: int) -> bool | None:
        out = compiler.outcome(b, "none", mesh)
        tried.append(out)
        return out.fits

    while len(tried) < budget:
        if fails_at is None:  # grow
            assert fits_at is not None
            b = fits_at * 2
        elif fits_at is None:  # shrink
            if fails_at <= 1:
                break
            b = max(fails_at // 2, 1)
        elif fails_at - fits_at <= 1:
            break
        else:
            b = (fits_at + fails_at) // 2
        answer = probe(b)
        if answer is None:
            break
        if answer:
            fits_at = b
        else:
            fails_at = b
    seconds = round(time.perf_counter() - started, 2)
    exact = fits_at is not None and fails_at is not None and fails_at - fits_at <= 1
    note = None if exact else f"bounded at {budget} compiles: the boundary lies between {fits_at} and {fails_at}"
    change = f"per-chip batch {fits_at} (the script's: {first.batch})" if fits_at is not None else None
    return Search(fits_at, tried, compiler.compiles - before, seconds, change, note)
