"""What ``parallelize`` checks of a model and an expanded plan before it splits anything.

Each check raises one :class:`~anydevice.errors.DistributedError` naming the module, the plan entries
and the numbers, where torch would fail later inside a forward (transformers' ``view()``, a DTensor
shape error) or, worse, train on without a word (a tied weight split apart).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from anydevice.errors import DistributedError
from anydevice.shims.tied import Owner, tied_groups
from anydevice.shims.tp_plan import Rule, split_dim


def refuse_meta(model: torch.nn.Module) -> None:
    """A model whose weights are on the meta device has nothing to split: refused with the fix."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_meta:
            raise DistributedError(
                f"{type(model).__name__} has its weights on the meta device ({name} is one): there is nothing to split "
                "or move yet.",
                "Give it real weights first, e.g. model.to_empty(device='cpu') and then model.load_state_dict(state) "
                "(or your own initialization), or load it without device='meta' / init_empty_weights; then parallelize.",
            )


def placement(owner: Owner, rule: Rule | None) -> str:
    """How the lowering leaves one owner's Parameter: ``"plain"``, ``"replicated"`` or ``"split on dim N"``."""
    if rule is None:
        return "plain"
    spec = rule.spec
    if spec.sequence:
        return "replicated"
    dim = split_dim(owner.module, spec)
    if dim is None:
        return "plain"
    if owner.key == "weight":
        return f"split on dim {dim}"
    if owner.key == "bias" and dim == 0 and isinstance(owner.module, torch.nn.Linear):
        return "split on dim 0"
    return "replicated"


def _disagreements(model: torch.nn.Module, rules: list[Rule]) -> Iterator[tuple[list[Owner], list[str]]]:
    by_name = {r.name: r for r in rules}
    for owners in tied_groups(model):
        where = [placement(o, by_name.get(o.name)) for o in owners]
        if len(set(where)) > 1:
            yield owners, where


def untie_auto(model: torch.nn.Module, rules: list[Rule]) -> list[Rule]:
    """``plan="auto"``: a tied pair whose entries split it differently is left out of the plan (kept whole)."""
    dropped = {o.name for owners, _ in _disagreements(model, rules) for o in owners}
    return [r for r in rules if r.name not in dropped]


def check_ties(model: torch.nn.Module, rules: list[Rule]) -> None:
    """A tied Parameter has one placement: every module holding it must be split the same way."""
    by_name = {r.name: r for r in rules}
    for owners, where in _disagreements(model, rules):
        held = ", ".join(
            f"{o.path} ({by_name[o.name].style!r} from {by_name[o.name].glob!r}: {w})"
            if o.name in by_name
            else f"{o.path} (not in the plan: {w})"
            for o, w in zip(owners, where, strict=True)
        )
        raise DistributedError(
            f"{owners[0].path} and {owners[1].path} are one Parameter (tied weights), but the plan places it differently: "
            f"{held}. Split apart, the copies would train apart.",
            "Give every module holding it a style that splits the same dimension (an nn.Embedding tied to a colwise "
            "Linear takes 'embedding_rowwise'), leave them all out of the plan, or untie the weights.",
        )


def check_heads(model: torch.nn.Module, rules: list[Rule], tp: int) -> None:
    """A split attention projection keeps whole heads on each rank: its head count must divide by ``tp``."""
    modules = dict(model.named_modules())
    for rule in rules:
        module = modules[rule.name]
        dim = split_dim(module, rule.spec)
        weight = getattr(module, "weight", None)
        if dim is None or not isinstance(module, torch.nn.Linear) or weight is None:
            continue
        parent = modules.get(rule.name.rpartition(".")[0])
        head_dim = getattr(parent, "head_dim", None) if parent is not None else None
        size = int(weight.shape[dim])
        if not isinstance(head_dim, int) or head_dim <= 0 or size % head_dim:
            continue
        heads = size // head_dim
        if heads % tp:
            raise DistributedError(
                f"{rule.name} ({rule.style}) holds {heads} attention heads of size {head_dim} ({size} features), which do "
                f"not split over the tensor-parallel degree {tp}: each rank needs whole heads.",
                f"Choose a tp degree that divides {heads}, or leave {rule.glob!r} out of the plan.",
            )


def _neighbours(rule: Rule, rules: list[Rule]) -> list[Rule]:
    """The other entries in the smallest block around ``rule`` that holds any (what it feeds or is fed by)."""
    name = rule.name
    while name:
        name = name.rpartition(".")[0]
        prefix = f"{name}." if name else ""
        near = [r for r in rules if r is not rule and r.name.startswith(prefix)]
        if near:
            return near
    return []


def check_flow(model: torch.nn.Module, rules: list[Rule]) -> None:
    """A ``colwise`` output (left split) must reach a ``rowwise`` module (which takes it split) in its block, and back."""
    modules = dict(model.named_modules())

    def takes_split(r: Rule) -> bool:
        return r.spec.input_sharded and not isinstance(modules[r.name], torch.nn.Embedding)

    for rule in rules:
        if rule.spec.output_sharded:
            near = _neighbours(rule, rules)
            if not any(takes_split(r) for r in near):
                _refuse_flow(rule, near, "leaves its output split on the last dimension", "'rowwise'", "'colwise_rep'")
        elif takes_split(rule):
            near = _neighbours(rule, rules)
            if not any(r.spec.output_sharded for r in near):
                _refuse_flow(rule, near, "takes its input split on the last dimension", "'colwise'", "'rowwise_rep'")


def _refuse_flow(rule: Rule, near: list[Rule], does: str, partner: str, alone: str) -> Any:
    listed = ", ".join(f"{r.name} ({r.style!r} from {r.glob!r})" for r in near) or "no other entry"
    raise DistributedError(
        f"The plan entry {rule.glob!r} makes {rule.name} {rule.style!r}, which {does}, but no {partner} module in its block "
        f"goes with it (its block has: {listed}).",
        f"Pair it with a {partner} module (colwise feeds rowwise, as in up_proj -> down_proj), or use {alone} "
        "for a module that stands alone.",
    )
