"""What ``parallelize`` checks of a model and an expanded plan before it splits anything.

Each check raises one :class:`~anydevice.errors.DistributedError` naming the module, the plan entries
and the numbers, where torch would fail later inside a forward (transformers' ``view()``, a DTensor
shape error) or, worse, train on without a word (a tied weight split apart).
"""

from __future__ import annotations

from collections import OrderedDict
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
        head_dim = _head_dim(parent, module, dim) if parent is not None else None
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


HEAD_COUNTS = ("num_heads", "n_heads", "n_head", "num_attention_heads", "nheads", "heads")
"""Attribute names an attention module (or its ``config``) gives its head count by."""
WIDTHS = ("embed_dim", "hidden_size", "d_model", "n_embd", "dim")
"""Attribute names it gives its model width by."""


def _head_dim(parent: torch.nn.Module, linear: torch.nn.Linear, dim: int) -> int | None:
    """The head size of the attention module ``parent`` whose projection ``linear`` is split on ``dim``, or None.

    Its (or its config's) ``head_dim``; else its width over its head count, the width taken from its attributes
    or, failing those, from ``linear``'s unsplit side (``in_features`` of a colwise q/k/v, ``out_features`` of a
    rowwise o).
    """
    sources = [parent, getattr(parent, "config", None)]
    for source in sources:
        size = getattr(source, "head_dim", None)
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    for source in sources:
        heads = _first_int(source, HEAD_COUNTS)
        if heads is None:
            continue
        width = _first_int(source, WIDTHS) or _first_int(parent, WIDTHS)
        if width is None:
            width = int(linear.weight.shape[1 - dim])
        return width // heads if width % heads == 0 else None
    return None


def _first_int(source: object, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(source, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


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


def check_chains(model: torch.nn.Module, rules: list[Rule]) -> None:
    """A ``colwise`` output (split on its last dimension) must not feed a module that takes its input whole.

    The block around each ``colwise`` entry is traced symbolically (``torch.fx``, the plan's modules kept whole):
    from the entry's output, the first plan module on every path must take a split input (``rowwise``).
    A block that does not trace (data-dependent control flow) is left to :func:`check_flow`; the trace never
    changes the block (its modules' state is put back) and is made once per block class and plan.
    """
    modules = dict(model.named_modules())
    by_parent: dict[str, dict[str, Rule]] = {}
    for rule in rules:
        parent, _, leaf = rule.name.rpartition(".")
        by_parent.setdefault(parent, {})[leaf] = rule
    seen: set[tuple[type, tuple[tuple[str, str], ...]]] = set()
    for parent_name, children in by_parent.items():
        if len(children) < 2 or not any(r.spec.output_sharded for r in children.values()):
            continue
        block = modules[parent_name]
        key = (type(block), tuple(sorted((leaf, r.style) for leaf, r in children.items())))
        if key in seen:
            continue
        seen.add(key)
        feeds = _feeds(block, set(children))
        if feeds is None:
            continue
        for source, targets in feeds.items():
            if not children[source].spec.output_sharded:
                continue
            for target in targets:
                if not children[target].spec.input_sharded:
                    _refuse_chain(children[source], children[target])


def _feeds(block: torch.nn.Module, leaves: set[str]) -> dict[str, list[str]] | None:
    """For each child in ``leaves``, the children in ``leaves`` its output reaches first; None when it does not trace."""
    import torch.fx

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
            return qualname in leaves or super().is_leaf_module(m, qualname)

    state = [
        (m, dict(vars(m)), {k: dict(v) for k, v in vars(m).items() if type(v) in (dict, OrderedDict)}) for m in block.modules()
    ]
    try:
        graph = Tracer().trace(block)
    except Exception:  # data-dependent control flow, unsupported ops: nothing known
        return None
    finally:
        for m, attributes, contents in state:  # a forward that stores on self (a cache) leaves no proxy behind
            vars(m).clear()
            vars(m).update(attributes)  # the same dicts (_modules, _buffers, hooks), with what they held
            for k, held in contents.items():
                attributes[k].clear()
                attributes[k].update(held)
    result: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op != "call_module" or node.target not in leaves:
            continue
        reached: list[str] = []
        stack, visited = list(node.users), set()
        while stack:
            user = stack.pop()
            if user in visited:
                continue
            visited.add(user)
            if user.op == "call_module" and user.target in leaves:
                reached.append(str(user.target))
            else:
                stack.extend(user.users)
        result[str(node.target)] = reached
    return result


def _refuse_chain(source: Rule, target: Rule) -> Any:
    raise DistributedError(
        f"The plan makes {source.name} {source.style!r} (from {source.glob!r}) and {target.name} {target.style!r} "
        f"(from {target.glob!r}), but {source.name}'s output feeds {target.name}: a 'colwise' output stays split on its "
        f"last dimension, and {target.style!r} takes its input whole.",
        f"Make {target.name} 'rowwise' (colwise feeds rowwise, as in up_proj -> down_proj), or make {source.name} "
        "'colwise_rep' so it hands on a whole activation.",
    )
