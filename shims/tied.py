"""Shared Parameters (tied weights) through every move and split: found by identity, then kept.

A model ties two weights by holding one ``Parameter`` object in two modules (a transformers model
with ``tie_word_embeddings=True``: ``lm_head.weight is model.embed_tokens.weight``). torch keeps the
object through ``Module.to`` only where the old and new tensors are of compatible kinds (cpu, cuda);
elsewhere (torch_xla) each module gets a new Parameter, and DTensor's ``parallelize_module`` gives
each module its own. The two copies then train apart without a word. :func:`move_module` keeps
every Parameter and buffer object (torch's swap-on-conversion, so an optimizer made before the move
keeps working too); :func:`retie` puts one object back in every module that held it before a split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

swap_tensors: Any = torch.utils.swap_tensors  # untyped in torch's stubs


@dataclass(frozen=True)
class Owner:
    """One place a Parameter is held: ``module.<key>``, the module named ``name`` in the model."""

    name: str
    module: torch.nn.Module
    key: str

    @property
    def path(self) -> str:
        """The Parameter's dotted name from this owner (``lm_head.weight``)."""
        return f"{self.name}.{self.key}" if self.name else self.key

    def get(self) -> torch.nn.Parameter | None:
        """The Parameter this owner holds now."""
        return self.module._parameters.get(self.key)

    def set(self, param: torch.nn.Parameter) -> None:
        """Make this owner hold ``param``."""
        self.module._parameters[self.key] = param


def tied_groups(model: torch.nn.Module) -> list[list[Owner]]:
    """Every Parameter held in more than one place, as its owners in module order (a shared submodule counts once)."""
    seen: dict[int, list[Owner]] = {}
    places: set[tuple[int, str]] = set()
    for name, module in model.named_modules(remove_duplicate=False):
        for key, param in module._parameters.items():
            if param is None or (id(module), key) in places:
                continue
            places.add((id(module), key))
            seen.setdefault(id(param), []).append(Owner(name, module, key))
    return [owners for owners in seen.values() if len(owners) > 1]


def retie(groups: list[list[Owner]]) -> None:
    """Make every owner of each group hold the first owner's (new) Parameter again."""
    for first, *rest in groups:
        param = first.get()
        if param is None:
            continue
        for owner in rest:
            if owner.get() is not param:
                owner.set(param)


def _changes_kind(module: torch.nn.Module, device: torch.device) -> bool:
    """Whether ``module.to(device)`` would give some Parameter a new object (an incompatible tensor kind)."""
    tensors = [*module.parameters(), *module.buffers()]
    if not tensors:
        return False
    probe = torch.empty(0, device=device)
    return any(t.device != probe.device and not torch._has_compatible_shallow_copy_type(t, probe) for t in tensors)


def move_module(module: torch.nn.Module, device: torch.device, non_blocking: bool = False) -> torch.nn.Module:
    """``module.to(device)`` in place that keeps every Parameter and buffer object, so tied weights stay tied.

    Where torch would make new Parameters (an XLA device), the move runs with torch's
    swap-on-conversion (``torch.__future__.set_swap_module_params_on_conversion``) and buffers are
    swapped back into their old objects. Where a swap is impossible (a tensor with weak references,
    e.g. held by a compiled graph), the plain move runs and the ties are put back by identity.
    """
    if not _changes_kind(module, device):
        return module.to(device, non_blocking=non_blocking)
    groups = tied_groups(module)
    buffers = [(owner, key, b) for owner in module.modules() for key, b in owner._buffers.items() if b is not None]
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        moved = module.to(device, non_blocking=non_blocking)
    except RuntimeError as error:
        if "swap" not in str(error):
            raise
        torch.__future__.set_swap_module_params_on_conversion(swapping)
        moved = module.to(device, non_blocking=non_blocking)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)
    for owner, key, old in buffers:
        new = owner._buffers.get(key)
        if new is not None and new is not old:
            try:
                swap_tensors(old, new)
            except RuntimeError:
                continue  # a buffer with weak references keeps its new object (buffers are never tied)
            owner._buffers[key] = old
    retie(groups)
    return moved
