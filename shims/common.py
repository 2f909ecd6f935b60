"""Helpers every shim implementation shares: moving nested objects, prefetching."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

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
        return fn(obj)  # type: ignore[return-value]
    if isinstance(obj, torch.nn.Module):
        return module_fn(obj) if module_fn is not None else obj  # type: ignore[return-value]
    if isinstance(obj, dict):
        return type(obj)((k, tree_map_tensors(v, fn, module_fn)) for k, v in obj.items())  # type: ignore[call-arg]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(tree_map_tensors(v, fn, module_fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map_tensors(v, fn, module_fn) for v in obj)  # type: ignore[call-arg]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: tree_map_tensors(getattr(obj, f.name), fn, module_fn) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def move(obj: T, device: torch.device, non_blocking: bool = False) -> T:
    """Move tensors, modules (in place, like ``module.to``) and nested containers of them to ``device``."""
    return tree_map_tensors(obj, lambda t: t.to(device, non_blocking=non_blocking), lambda m: m.to(device))


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
        return len(self.loader)  # type: ignore[arg-type]

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
