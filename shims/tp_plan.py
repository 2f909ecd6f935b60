"""Tensor-parallel plans as data: ``{glob: style}`` in transformers' vocabulary, checked and expanded.

A plan maps module-name globs (``layers.*.mlp.up_proj``; ``*`` matches one name part) to a style.
Every device lowers the same expanded plan its own way (``Collectives.parallelize``): DTensor's
``parallelize_module`` where ``Collectives.tensor_parallel == "dtensor"``, per-parameter
``mark_sharding`` where it is ``"spmd"`` (torch_xla). This module only reads the model: it
validates a plan before any process group, mesh or compile exists.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from anydevice.errors import DistributedError

TP_AXIS = "tp"
DP_AXIS = "dp"


@dataclass(frozen=True)
class Style:
    """What a style does to a module's weight and to its input and output.

    :param weight_dim: the ``nn.Linear`` weight dimension split across the ``tp`` axis (None: none).
    :param input_sharded: the module takes its input split on the last dimension (rowwise after colwise).
    :param output_sharded: the module's output stays split on the last dimension (colwise into rowwise).
    :param sequence: the module runs on a sequence-split activation (``sequence_parallel``).
    """

    weight_dim: int | None
    input_sharded: bool = False
    output_sharded: bool = False
    sequence: bool = False


STYLES: dict[str, Style] = {
    "colwise": Style(weight_dim=0, output_sharded=True),
    "colwise_rep": Style(weight_dim=0),
    "colwise_gather_output": Style(weight_dim=0),
    "rowwise": Style(weight_dim=1, input_sharded=True),
    "rowwise_rep": Style(weight_dim=1),
    "rowwise_split_input": Style(weight_dim=1),
    "embedding_colwise": Style(weight_dim=0),
    "embedding_rowwise": Style(weight_dim=1),
    "sequence_parallel": Style(weight_dim=None, sequence=True),
    "replicated": Style(weight_dim=None),
    "replicate": Style(weight_dim=None),
}
"""The styles anydevice lowers on every device. ``colwise``: output features split, output left split;
``rowwise``: input features split, input taken split, output summed (replicated). The ``_rep`` /
``_gather_output`` / ``_split_input`` forms take and give replicated activations; ``embedding_colwise`` /
``embedding_rowwise`` split an ``nn.Embedding``'s dim or vocabulary and give a replicated output."""

EMBEDDING_DIM = {0: 1, 1: 0}
"""An ``nn.Embedding`` weight is ``(num_embeddings, dim)``: colwise splits dim 1, rowwise dim 0."""


@dataclass(frozen=True)
class Rule:
    """One module of the model and the style it gets."""

    name: str
    style: str
    glob: str

    @property
    def spec(self) -> Style:
        """The :class:`Style` named by :attr:`style`."""
        return STYLES[self.style]


def _glob_regex(glob: str) -> re.Pattern[str]:
    """``*`` alone matches one name part; inside a part it matches any characters but a dot."""
    parts = [r"[^.]+" if part == "*" else re.escape(part).replace(r"\*", r"[^.]*") for part in glob.split(".")]
    return re.compile(r"\.".join(parts) + r"\Z")


def auto_plan(model: Any) -> dict[str, str]:
    """The model's own plan: ``tp_plan`` a model class declares, else a transformers model's plans, else a
    Diffusers model's ``_tp_plan``.

    transformers keys ``config.base_model_tp_plan`` from the base model (``layers.*...``) and
    ``_tp_plan`` from the full model (``lm_head``); the base keys get the base model's prefix. Diffusers
    (0.42: Flux, Flux2, QwenImage transformers) keys ``_tp_plan`` by full module names.
    """
    declared = getattr(model, "tp_plan", None)
    if isinstance(declared, Mapping) and declared:
        return dict(declared)
    plan: dict[str, str] = {}
    config = getattr(model, "config", None)
    base = getattr(config, "base_model_tp_plan", None)
    if isinstance(base, Mapping) and base:
        prefix = getattr(model, "base_model_prefix", "")
        nested = bool(prefix) and hasattr(model, prefix) and getattr(model, prefix) is not model
        plan.update({f"{prefix}.{k}" if nested else k: str(v) for k, v in base.items()})
    own = getattr(type(model), "_tp_plan", None)
    if isinstance(own, Mapping) and plan:
        plan.update({str(k): str(v) for k, v in own.items()})  # an unknown style is refused by expand()
    elif isinstance(own, Mapping) and own:  # a Diffusers model's own plan: full module names, its styles
        plan = _diffusers_plan(model, own)
    if not plan:
        raise DistributedError(
            f"plan='auto': {type(model).__name__} declares no tensor-parallel plan.",
            "Pass a plan {glob: style} (e.g. {'layers.*.mlp.up_proj': 'colwise', 'layers.*.mlp.down_proj': 'rowwise'}), "
            "or give the model class a tp_plan attribute.",
        )
    return plan


def _diffusers_plan(model: Any, own: Mapping[Any, Any]) -> dict[str, str]:
    """A ``_tp_plan`` a Diffusers model class declares; its packed styles (objects, not names) are refused."""
    packed = {str(k): type(v).__name__ for k, v in own.items() if not isinstance(v, str)}
    if packed:
        listed = ", ".join(f"{k} ({v})" for k, v in packed.items())
        raise DistributedError(
            f"plan='auto': {type(model).__name__}'s own plan (_tp_plan) splits fused projections with styles anydevice "
            f"does not lower: {listed}.",
            "Pass a plan {glob: style} without those modules and without the colwise modules that feed them, e.g. "
            "only the entries under 'transformer_blocks.*' of a Flux model.",
        )
    return {str(k): str(v) for k, v in own.items()}


def expand(model: Any, plan: Mapping[str, str] | str) -> list[Rule]:
    """The modules each glob of ``plan`` names, with their style; every error before anything runs."""
    table = auto_plan(model) if plan == "auto" else plan
    if not isinstance(table, Mapping):
        raise DistributedError(f"plan={plan!r} is neither 'auto' nor a dict {{glob: style}}.")
    modules = dict(model.named_modules())
    names = [n for n in modules if n]
    rules: dict[str, Rule] = {}
    for glob, style in table.items():
        if style not in STYLES:
            close = difflib.get_close_matches(str(style), STYLES, n=3)
            raise DistributedError(
                f"Unknown tensor-parallel style {style!r} for {glob!r}.",
                f"Use one of: {', '.join(STYLES)}" + (f" (did you mean {' or '.join(close)}?)" if close else "."),
            )
        pattern = _glob_regex(glob)
        hits = [n for n in names if pattern.match(n)]
        if not hits:
            close = difflib.get_close_matches(glob, names, n=3, cutoff=0.3)
            raise DistributedError(
                f"The plan's glob {glob!r} matches no module of {type(model).__name__}.",
                "Closest module names: " + (", ".join(close) if close else ", ".join(names[:5])) + ". '*' matches one name part.",
            )
        for name in hits:
            earlier = rules.get(name)
            if earlier is not None and earlier.style != style:
                raise DistributedError(
                    f"{name} is named by two plan entries with different styles: {earlier.glob!r} ({earlier.style}) and "
                    f"{glob!r} ({style}).",
                    f"Give each module one style: narrow {glob!r} or {earlier.glob!r} so that they do not both match {name}.",
                )
            rules[name] = Rule(name=name, style=style, glob=glob)
    return list(rules.values())


def split_dim(module: Any, style: Style) -> int | None:
    """The weight dimension ``style`` splits on ``module`` (None: nothing is split)."""
    import torch

    if style.weight_dim is None:
        return None
    if isinstance(module, torch.nn.Embedding):
        return EMBEDDING_DIM[style.weight_dim]
    return style.weight_dim


def check_divisible(model: Any, rules: list[Rule], tp: int) -> None:
    """Every split weight dimension must divide by the ``tp`` degree; one error naming the first that does not."""
    import torch

    modules = dict(model.named_modules())
    for rule in rules:
        module = modules[rule.name]
        dim = split_dim(module, rule.spec)
        if dim is None:
            continue
        weight = getattr(module, "weight", None)
        if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) or weight is None:
            raise DistributedError(
                f"{rule.name} ({type(module).__name__}) cannot be {rule.style}: only nn.Linear and nn.Embedding are split.",
                "Point the glob at the Linear layers inside it.",
            )
        size = int(weight.shape[dim])
        if size % tp:
            raise DistributedError(
                f"{rule.name}.weight dimension {dim} has size {size}, not divisible by the tensor-parallel degree {tp} "
                f"({rule.style}).",
                f"Choose a tp degree that divides {size}, or leave {rule.name} out of the plan.",
            )


def degrees(spec: Mapping[str, int], world: int) -> dict[str, int]:
    """Named mesh degrees with ``-1`` (at most one) resolved to what is left of ``world``; checks they multiply to it."""
    if not spec:
        raise DistributedError("A named mesh needs at least one axis, e.g. {'dp': -1, 'tp': 2}.")
    free = [k for k, v in spec.items() if v == -1]
    bad = {k: v for k, v in spec.items() if not isinstance(v, int) or (v < 1 and v != -1)}
    if bad or len(free) > 1:
        raise DistributedError(
            f"Mesh degrees {dict(spec)} are invalid: each is a positive integer, and at most one is -1 (what is left).",
        )
    fixed = math.prod(v for v in spec.values() if v != -1)
    if world % fixed:
        raise DistributedError(
            f"Mesh degrees {dict(spec)} multiply to {fixed}, which does not divide the world size {world}.",
            f"Use degrees whose product divides {world}, or launch a multiple of {fixed} processes (devices on xla).",
        )
    out = {k: (world // fixed if v == -1 else v) for k, v in spec.items()}
    if free == [] and fixed != world:
        raise DistributedError(
            f"Mesh degrees {dict(spec)} multiply to {fixed}, but the world size is {world}.",
            "Make one degree -1 to take what is left, or change the degrees.",
        )
    return out
