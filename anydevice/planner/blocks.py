"""A model's repeated blocks: found, checkpointed (``ad.checkpoint_blocks``) or truncated (the plan's composed compile).

The repeated blocks are the children of the largest ``nn.ModuleList`` whose children are all of one type (a
decoder's layers). Checkpointing keeps parameter names and the model's class: each wrapped module's class becomes
a subclass whose ``forward`` recomputes itself in backward (``torch.utils.checkpoint`` in eager torch; under
torchax, JAX's ``jax.checkpoint`` of the same forward, so libtpu's compiled program rematerializes it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

from anydevice.errors import AnyDeviceError

Level = Literal["none", "blocks", "layers"]
LEVELS: tuple[Level, ...] = ("none", "blocks", "layers")
"""The checkpointing the plan tries, lightest first: none, each repeated block, every layer with parameters."""
_CHECKPOINTED: dict[type, type] = {}


def repeated_blocks(model: Any) -> tuple[str, Any] | None:
    """``(qualified name, the ModuleList)`` of the largest list of same-type modules (at least 2), or None."""
    import torch

    lists = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2 and len({type(c) for c in m}) == 1
    ]
    return max(lists, key=lambda nm: len(nm[1]) * sum(p.numel() for p in nm[1][0].parameters()), default=None)


def checkpoint_blocks(model: Any, level: Level = "blocks") -> Any:
    """Recompute activations in backward instead of keeping them: each repeated block (``level="blocks"``) or every
    module that holds parameters directly (``"layers"``). Changes ``model`` in place and returns it; parameter
    names, ``state_dict`` and the model's class are unchanged. A model without repeated blocks is refused by name."""
    import torch

    if level == "none":
        return model
    if level == "blocks":
        found = repeated_blocks(model)
        if found is None:
            raise AnyDeviceError(
                f"{type(model).__name__} has no repeated blocks (an nn.ModuleList of modules of one type) to checkpoint.",
                'Checkpoint every layer instead: ad.checkpoint_blocks(model, level="layers").',
            )
        targets = list(found[1])
    elif level == "layers":
        targets = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
    else:
        raise AnyDeviceError(f"Unknown checkpointing level {level!r}.", f"Choose one of {', '.join(LEVELS)}.")
    for module in targets:
        if type(module) not in _CHECKPOINTED.values():
            module.__class__ = _checkpointed_class(type(module))
    del torch
    return model


def _checkpointed_class(base: type) -> type:
    found = _CHECKPOINTED.get(base)
    if found is None:
        found = type(base.__name__, (base,), {"forward": _recomputed_forward, "__module__": base.__module__})
        _CHECKPOINTED[base] = found
    return found


def _recomputed_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    base: Any = next(b for b, c in _CHECKPOINTED.items() if c is type(self))
    leaves, spec = tree_flatten((args, kwargs))
    at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def run(*tensors: Any) -> Any:
        filled = list(leaves)
        for i, t in zip(at, tensors):
            filled[i] = t
        call_args, call_kwargs = tree_unflatten(filled, spec)
        return base.forward(self, *call_args, **call_kwargs)

    tensors = [leaves[i] for i in at]
    if any(type(t).__module__.startswith("torchax") for t in tensors):  # lowered to JAX: JAX's own rematerialization
        from torchax.interop import gradient_checkpoint

        return gradient_checkpoint(run)(*tensors)
    if torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(run, *tensors, use_reentrant=False)
    return run(*tensors)


@contextlib.contextmanager
def blocks_kept(model: Any, count: int) -> Iterator[int]:
    """Within the block, the model's repeated-block list holds only its first ``count`` blocks; yields how many it had."""
    import torch

    found = repeated_blocks(model)
    if found is None:
        raise AnyDeviceError(f"{type(model).__name__} has no repeated blocks to compose from.", "Plan without compose=True.")
    name, blocks = found
    parent_name, _, attribute = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attribute, torch.nn.ModuleList(list(blocks)[:count]))
    try:
        yield len(blocks)
    finally:
        setattr(parent, attribute, blocks)
