"""Data-parallel wrapping shared by every device: DDP and FSDP2 (``fully_shard``).

FSDP shards the model per transformer block. :func:`shard_plan` picks the units, in this order:

1. ``units=``: the module classes (or class names) the caller names;
2. a Hugging Face model's ``_no_split_modules`` (its decoder-layer class, e.g. ``LlamaDecoderLayer``);
3. the repeated children of a ``ModuleList`` (every child of one class, two or more of them).

Everything outside the units (embeddings, final norm, head) stays in the root unit. Parameters
that are tied (``tie_word_embeddings=True``: ``lm_head.weight`` is ``embed_tokens.weight``) are
kept in one unit: a unit that would split a tied group is not sharded on its own, so its
parameters fall to the unit above it (the root). The choice is logged once on stderr.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from anydevice import settings
from anydevice.errors import DistributedError, UnsupportedFeatureError

UnitSpec = type | str
"""A module class, or its class name (``"LlamaDecoderLayer"``)."""


def _require_process_group() -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise DistributedError(
            "Wrapping a model for data parallelism needs a process group.",
            "Call anydevice.distributed.init() first (it works in a single process too).",
        )


def ddp(model: torch.nn.Module, device_ids: list[int] | None = None, **options: Any) -> torch.nn.Module:
    """``DistributedDataParallel`` over the current process group."""
    _require_process_group()
    if options.get("units") is not None:
        raise DistributedError(
            "units= chooses FSDP units; DDP keeps the whole model on every rank.", "Drop units= or use 'fsdp'."
        )
    options.pop("units", None)
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=device_ids, **options)


@dataclass(frozen=True)
class ShardPlan:
    """The FSDP units chosen for a model, why, and what stayed in the root unit."""

    units: list[str]
    """Qualified names of the modules sharded as their own units, innermost first."""
    source: str
    """How they were chosen: ``units=``, ``_no_split_modules`` or ``ModuleList``; ``none`` for the root only."""
    root: list[str]
    """Qualified names of the root's direct parameters' owners (what the root unit holds)."""
    tied: list[list[str]] = field(default_factory=list)
    """Groups of parameter names that are one tensor (kept in one unit)."""
    dropped: list[str] = field(default_factory=list)
    """Candidate units not sharded on their own because they would split a tied group."""
    kinds: dict[str, str] = field(default_factory=dict)
    """Unit name -> its class name."""

    def describe(self) -> str:
        """One line: the units by class, and what the root holds."""
        if not self.units:
            return "one unit, the whole model (no repeated blocks found; pass units=[BlockClass] to shard per block)"
        kinds = Counter(self.kinds.values())
        blocks = ", ".join(f"{n} x {k}" for k, n in kinds.items())
        line = f"{len(self.units)} unit(s) ({blocks}, from {self.source}) plus the root"
        if self.root:
            line += f" holding {', '.join(self.root[:6])}{', ...' if len(self.root) > 6 else ''}"
        if self.tied:
            line += "; tied, kept in one unit: " + "; ".join(" = ".join(g) for g in self.tied)
        if self.dropped:
            line += f"; not sharded alone (tied): {', '.join(self.dropped)}"
        return line


def _matches(module: torch.nn.Module, wanted: Iterable[UnitSpec]) -> bool:
    for spec in wanted:
        if isinstance(spec, str):
            if type(module).__name__ == spec:
                return True
        elif isinstance(module, spec):
            return True
    return False


def _no_split_names(model: torch.nn.Module) -> set[str]:
    names: set[str] = set()
    for module in model.modules():
        found = getattr(module, "_no_split_modules", None)
        if found:
            names.update(str(n) for n in found)
    return names


def _repeated_children(model: torch.nn.Module) -> list[str]:
    """Children of each ModuleList whose members are all one class (two or more), outermost lists only."""
    chosen: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) < 2:
            continue
        if any(name.startswith(c + ".") for c in chosen):
            continue
        if len({type(child) for child in module}) == 1 and any(p.requires_grad for p in module.parameters()):
            chosen.extend(f"{name}.{i}" if name else str(i) for i in range(len(module)))
    return chosen


def _owner(param_name: str, units: list[str]) -> str:
    """The innermost unit holding a parameter ('' for the root)."""
    best = ""
    for unit in units:
        if param_name.startswith(unit + ".") and len(unit) > len(best):
            best = unit
    return best


def shard_plan(model: torch.nn.Module, units: Iterable[UnitSpec] | None = None) -> ShardPlan:
    """Choose the FSDP units of ``model`` (see the module docstring) without sharding anything."""
    modules = dict(model.named_modules())
    if units is not None:
        wanted = list(units)
        if not wanted or not all(isinstance(u, (type, str)) for u in wanted):
            raise DistributedError(f"units= takes module classes or class names, got {wanted!r}.")
        names, source = [n for n, m in modules.items() if n and _matches(m, wanted)], "units="
        if not names:
            present = sorted({type(m).__name__ for m in modules.values()})
            raise DistributedError(
                f"units={[u if isinstance(u, str) else u.__name__ for u in wanted]} matches no module of {type(model).__name__}.",
                f"Name classes the model contains, e.g. one of: {', '.join(present[:12])}.",
            )
    else:
        no_split = _no_split_names(model)
        names = [n for n, m in modules.items() if n and type(m).__name__ in no_split]
        source = "the model's _no_split_modules"
        if not names:
            names, source = _repeated_children(model), "the repeated children of a ModuleList"
    # Tied parameters: one tensor under several names must stay in one unit.
    by_tensor: dict[int, list[str]] = {}
    for pname, param in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(param), []).append(pname)
    tied = [group for group in by_tensor.values() if len(group) > 1]
    dropped: list[str] = []
    changed = True
    while changed:
        changed = False
        for group in tied:
            owners = {_owner(p, names) for p in group}
            if len(owners) > 1:
                for owner in owners - {""}:
                    names.remove(owner)
                    dropped.append(owner)
                changed = True
                break
    names.sort(key=lambda n: -n.count("."))  # innermost first: fully_shard children before parents
    every = model.named_parameters(remove_duplicate=False)
    root = sorted({p.rsplit(".", 1)[0] for p, _ in every if _owner(p, names) == ""})
    kinds = {n: type(modules[n]).__name__ for n in names}
    return ShardPlan(units=names, source=source if names else "none", root=root, tied=tied, dropped=dropped, kinds=kinds)


_logged: set[str] = set()


def _log_once(model: torch.nn.Module, plan: ShardPlan) -> None:
    line = f"anydevice: fsdp: {type(model).__name__}: {plan.describe()}\n"
    if line in _logged or settings.ANYDEVICE_QUIET.flag():
        return
    _logged.add(line)
    if not dist.is_initialized() or dist.get_rank() == 0:
        sys.stderr.write(line)


def fsdp(model: torch.nn.Module, device_type: str, units: Iterable[UnitSpec] | None = None, **options: Any) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each unit of :func:`shard_plan` (per block), then the root, over a 1-D mesh."""
    _require_process_group()
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError as exc:  # torch < 2.6
        raise UnsupportedFeatureError(f"FSDP2 needs torch >= 2.6 ({exc}).", "Upgrade torch or use 'ddp'.") from exc
    from torch.distributed.device_mesh import init_device_mesh

    plan = shard_plan(model, units)
    _log_once(model, plan)
    mesh = options.pop("mesh", None) or init_device_mesh(device_type, (dist.get_world_size(),))
    modules = dict(model.named_modules())
    for name in plan.units:
        fully_shard(modules[name], mesh=mesh, **options)
    # The root too reshards after forward: left unsharded (FSDP2's default for a root), a forward under
    # no_grad (an evaluation before training) keeps stale full weights there, and the next steps train
    # on them: losses off by 5e-3 after 3 AdamW steps (torch 2.13, gloo; the parallel probes caught it).
    fully_shard(model, mesh=mesh, **{"reshard_after_forward": True, **options})
    return model
