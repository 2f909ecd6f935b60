"""A model as anydevice leaves it, brought to the host for export: unwrapped, gathered, in eval mode.

The caller's model is never changed: export works on a CPU copy. ``torch.compile`` wrappers
(``_orig_mod``) and DDP wrappers (``module``) are peeled off; FSDP2 / tensor-parallel
parameters (``DTensor``) are gathered with ``full_tensor()``, a collective every rank must reach.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from anydevice.errors import ExportError


def unwrap(model: nn.Module) -> nn.Module:
    """The module under ``torch.compile`` (``_orig_mod``) and DDP (``module``) wrappers."""
    from torch.nn.parallel import DistributedDataParallel

    while True:
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
        elif isinstance(model, DistributedDataParallel):
            model = model.module
        else:
            return model


def _is_fsdp1(model: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # a torch built without distributed
        return False
    return isinstance(model, FullyShardedDataParallel)


def check_model(model: object) -> None:
    """An :class:`ExportError` unless ``model`` is a module ``ad.export`` can copy to the host."""
    if not isinstance(model, nn.Module):
        raise ExportError(
            f"ad.export needs a torch.nn.Module, got {type(model).__name__}.",
            "Pass the model itself (for a function, wrap it in a small nn.Module whose forward calls it).",
        )
    if _is_fsdp1(model):
        raise ExportError(
            "ad.export takes FSDP2 (fully_shard, what ad.distributed.wrap makes) models, not FSDP1 "
            "FullyShardedDataParallel ones: their flat parameters cannot be gathered into the original module here.",
            "Load the full state dict into an unwrapped copy of the model and export that.",
        )


def host_copy(model: nn.Module) -> nn.Module:
    """A CPU copy of ``model``'s unwrapped module in eval mode, every sharded tensor gathered whole."""
    check_model(model)
    core = unwrap(model)
    gathered: dict[int, torch.Tensor] = {}  # one host tensor per original: tied weights stay tied
    named = [*core.named_parameters(remove_duplicate=False), *core.named_buffers(remove_duplicate=False)]
    state = {}
    for name, tensor in named:
        if id(tensor) not in gathered:
            gathered[id(tensor)] = _whole(tensor)
        state[name] = gathered[id(tensor)]
    skeleton = _skeleton(core)
    skeleton.load_state_dict(state, strict=False, assign=True)
    _place_remaining(skeleton, core)
    return skeleton.eval()


def _skeleton(core: nn.Module) -> nn.Module:
    """A deep copy of ``core`` whose tensors are tiny placeholders on the meta device (then replaced)."""
    memo: dict[int, Any] = {}
    for tensor in [*core.parameters(), *core.buffers()]:
        meta = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
        memo[id(tensor)] = nn.Parameter(meta, requires_grad=False) if isinstance(tensor, nn.Parameter) else meta
    sharded = _fsdp2_classes(core)
    for sub, _ in sharded:  # fully_shard's state and its unshard/reshard hooks (collectives): not copied
        for key, value in sub.__dict__.items():
            if key.startswith("__composable_api_state_key") or key.startswith("_forward_"):
                memo[id(value)] = type(value)()
    try:
        for sub, cls in sharded:  # FSDP2 refuses deepcopy: copy as the original classes, then put them back
            sub.__class__ = cls.__mro__[2]  # FSDP<Name>(FSDPModule, Name): the class fully_shard replaced
        skeleton = copy.deepcopy(core, memo)
    finally:
        for sub, cls in sharded:
            sub.__class__ = cls
    return skeleton


def _fsdp2_classes(module: nn.Module) -> list[tuple[nn.Module, type]]:
    """The submodules whose class FSDP2's ``fully_shard`` replaced with ``FSDP<Name>``, with that class."""
    found = []
    for sub in module.modules():
        cls = type(sub)
        if cls.__name__.startswith("FSDP") and "FSDPModule" in {base.__name__ for base in cls.__mro__}:
            found.append((sub, cls))
    return found


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """The full tensor on the host, detached: a ``DTensor`` shard is gathered from every rank."""
    full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
    return full.detach().to("cpu", copy=True)


def _place_remaining(skeleton: nn.Module, core: nn.Module) -> None:
    """Non-persistent buffers the state dict skipped: copied to the host as well."""
    originals = dict(core.named_buffers(remove_duplicate=False))
    for name, buffer in list(skeleton.named_buffers(remove_duplicate=False)):
        if buffer.device.type == "meta":
            owner_name, _, leaf = name.rpartition(".")
            owner = skeleton.get_submodule(owner_name) if owner_name else skeleton
            owner._buffers[leaf] = _whole(originals[name])


def host_inputs(example_inputs: Any) -> tuple[Any, ...]:
    """The example inputs as a tuple of host tensors (one tensor, a tuple or a list of them)."""
    items = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if not items:
        raise ExportError("ad.export needs example inputs: got none.", "Pass the tensors one forward call takes, e.g. (tokens,).")
    moved: list[Any] = []
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise ExportError(
                f"Example input {i} is a {type(item).__name__}, not a tensor.",
                "ad.export traces forward(*example_inputs) with tensors; bake other arguments into the module "
                "(a small wrapper nn.Module) or pass them as tensors.",
            )
        moved.append(_whole(item))
    return tuple(moved)
