"""Helpers every shim implementation shares: moving nested objects, prefetching."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any, TypeVar, cast

import torch

from anydevice.settings import local_rank as local_rank  # the one rank reader; shims.cuda_compat imports it here

T = TypeVar("T")


def tree_map_tensors(
    obj: T, fn: Callable[[torch.Tensor], torch.Tensor], module_fn: Callable[[torch.nn.Module], Any] | None = None
) -> T:
    """Apply ``fn`` to every tensor inside nested dicts, lists, tuples, named tuples and dataclasses.

    Modules, at the top or nested, go to ``module_fn`` when given; other leaves are kept as they are.
    """
    if isinstance(obj, torch.Tensor):
        return cast(T, fn(obj))
    if isinstance(obj, torch.nn.Module):
        return cast(T, module_fn(obj)) if module_fn is not None else obj
    if isinstance(obj, dict):
        return cast(T, type(obj)((k, tree_map_tensors(v, fn, module_fn)) for k, v in obj.items()))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(tree_map_tensors(v, fn, module_fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return cast(T, type(obj)(tree_map_tensors(v, fn, module_fn) for v in obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: tree_map_tensors(getattr(obj, f.name), fn, module_fn) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def move(obj: T, device: torch.device, non_blocking: bool = False) -> T:
    """Move tensors, modules (in place, like ``module.to``) and nested containers of them to ``device``.

    A module keeps its Parameter objects, so tied weights stay tied (:func:`anydevice.shims.tied.move_module`).
    """
    from anydevice.shims.tied import move_module

    return tree_map_tensors(
        obj, lambda t: t.to(device, non_blocking=non_blocking), lambda m: move_module(m, device, non_blocking)
    )


def to_cpu(obj: T) -> T:
    """A CPU copy of every tensor in ``obj``; modules are copied, so the caller's stay where they are."""
    return tree_map_tensors(obj, lambda t: t.detach().to("cpu"), lambda m: copy.deepcopy(m).to("cpu"))


class Prefetcher(Iterable[T]):
    """Iterate a loader, moving the next batch to the device while the current one is used."""

    def __init__(self, loader: Iterable[T], device: torch.device, non_blocking: bool) -> None:
        self.loader = loader
        self.device = device
        self.non_blocking = non_blocking

    def __len__(self) -> int:
        return len(cast(Sized, self.loader))  # a loader without a length raises TypeError, as len() does

    def __iter__(self) -> Iterator[T]:
        iterator = iter(self.loader)
        try:
            ahead = move(next(iterator), self.device, self.non_blocking)
        except StopIteration:
            return
        for batch in iterator:
            current, ahead = ahead, move(batch, self.device, self.non_blocking)
            yield current
        yield ahead


def peak_flops(table: Mapping[str, float], chip: str | None, dtype: torch.dtype) -> float | None:
    """Dense peak FLOP/s of ``chip`` from a plugin's bf16/fp16 TFLOP/s ``table``; None when unknown."""
    if dtype not in (torch.bfloat16, torch.float16) or chip is None or chip not in table:
        return None
    return table[chip] * 1e12
