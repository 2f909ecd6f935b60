"""What makes cuda-compat's stand-ins behave like the objects they replace: they pickle and subclass as torch's do.

A function of the script's ``torch.cuda`` view (``torch.cuda.device_count``) is a :class:`StandIn`: it
calls the view's answer, and it pickles as a reference to the real ``torch.cuda.device_count`` (so
``functools.partial(torch.cuda.manual_seed, 0)`` crosses to a DataLoader worker or a spawned child, and
unpickles where anydevice is not installed, as it does from CPU torch). A stand-in class
(``torch.cuda.Event``, ``torch.Generator``) has :class:`StandInType` as metaclass: the class itself pickles
as the real one; a class a script derives from it pickles by its own name, as any class does.
"""

from __future__ import annotations

import copyreg
import functools
import pkgutil
from collections.abc import Callable
from typing import Any

WHERE = "_anydevice_stands_for"
"""The class attribute naming what a stand-in class stands for (``"torch.cuda:Event"``)."""


class StandIn:
    """A stand-in function: calls ``fn``; pickles as the real ``module:name`` it replaces."""

    def __init__(self, fn: Callable[..., Any], stands_for: str) -> None:
        functools.update_wrapper(self, fn)
        self._call = fn
        self._stands_for = stands_for

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return pkgutil.resolve_name, (self._stands_for,)

    def __repr__(self) -> str:
        return f"<function {self._stands_for.replace(':', '.')} (anydevice cuda-compat)>"


def stand_in(fn: Any, stands_for: str) -> Any:
    """``fn`` as a :class:`StandIn` for ``stands_for`` (``"torch.cuda:device_count"``); classes and modules unchanged."""
    if isinstance(fn, (type, StandIn)) or not callable(fn) or type(fn).__name__ == "module":
        return fn
    return StandIn(fn, stands_for)


class StandInType(type):
    """Metaclass of the stand-in classes: the stand-in pickles as what it stands for, a subclass by its name."""


def _reduce_class(cls: type) -> Any:
    stands_for = cls.__dict__.get(WHERE)
    if stands_for is None:
        return cls.__qualname__  # a class the script derived: pickled by name, as any class
    return pkgutil.resolve_name, (stands_for,)


def picklable(metaclass: type) -> type:
    """Register ``metaclass`` (a :class:`StandInType`) with pickle; returns it."""
    copyreg.pickle(metaclass, _reduce_class)
    return metaclass


picklable(StandInType)
