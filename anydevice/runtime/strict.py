"""Strict mode (``ANYDEVICE_STRICT=1``, ``ad.use(..., strict=True)``): CPU fallback is an error.

How a fallback is noticed is the device plugin's declaration (``CheckFacts.fallback``):

- ``counters`` (torch_xla): ``ad.step()`` reads the runtime's fallback counters (host-side metrics, no
  device value is read) after the step marker; an op counted since the previous step raises
  :class:`~anydevice.errors.CpuFallbackError` naming it. The line of user code comes from a light
  ``TorchDispatchMode`` that remembers, for ops with no kernel for the device's dispatch key
  (``OpTable.dispatch_key``), the first frame outside torch and anydevice that called them.
- ``warnings`` (TorchTPU, MPS): the runtime's fallback warnings (``CheckFacts.fallback_warning``) become errors,
  raised where the op runs.
- ``never`` (cpu, cuda, xpu): the device runs every op or raises; nothing to watch.
- ``unknown``: strict mode refuses to start instead of pretending to check.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
import warnings
from types import FrameType
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.errors import CpuFallbackError, UnsupportedFeatureError

if TYPE_CHECKING:
    from anydevice.contract.check_facts import CheckFacts
    from anydevice.runtime.backend import Backend

HOST_READS = frozenset({"aten::_local_scalar_dense"})
"""What torch_xla counts among fallbacks but is a read of a device value (``.item()``), not an op computed on the CPU."""
_explicit: bool | None = None
_lock = threading.Lock()
_watch: _Watch | None = None


def set_explicit(strict: bool | None) -> None:
    """``ad.use(..., strict=...)``: True or False wins over ``ANYDEVICE_STRICT``; None keeps the variable's say."""
    global _explicit
    _explicit = strict


def enabled() -> bool:
    """Whether strict mode is on: ``ad.use(..., strict=)`` if given, else ``ANYDEVICE_STRICT``."""
    return _explicit if _explicit is not None else settings.ANYDEVICE_STRICT.flag()


def reset() -> None:
    """Forget the explicit choice and stop watching (``anydevice.reset()``)."""
    global _watch
    set_explicit(None)
    with _lock:
        if _watch is not None:
            _watch.close()
            _watch = None


def after_step(backend: Backend) -> None:
    """Called by ``ad.step()`` after the step marker: raise for ops that fell back since the previous step."""
    if enabled():
        _watch_for(backend).check()


def activate(backend: Backend) -> None:
    """Start watching ``backend`` now (``ad.use(..., strict=True)``); refuse where fallback cannot be noticed."""
    if enabled():
        _watch_for(backend)


def _watch_for(backend: Backend) -> _Watch:
    global _watch
    with _lock:
        if _watch is None or _watch.backend is not backend:
            if _watch is not None:
                _watch.close()
            _watch = _Watch(backend)
        return _watch


def _facts(backend: Backend) -> CheckFacts:
    from anydevice.runtime.registry import get_registry

    return get_registry().get(backend.name).spec.check


class _Watch:
    """What strict mode keeps for one backend: the counters already seen and the lines of calls."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.facts = _facts(backend)
        self.seen: dict[str, int] = {}
        self.lines: _FallbackLines | None = None
        mechanism = self.facts.fallback
        if mechanism == "unknown":
            raise refusal(backend.name, self.facts)
        if mechanism == "warnings" and self.facts.fallback_warning:
            warnings.filterwarnings("error", message=f".*{self.facts.fallback_warning}")
        if mechanism == "counters":
            self.seen = self._counts()
            table = self.facts.op_table
            if table is not None and table.dispatch_key:
                self.lines = _FallbackLines(table.dispatch_key, backend.device_type)
                self.lines.__enter__()

    def _counts(self) -> dict[str, int]:
        from anydevice.shims.contracts import Diagnostics

        diagnostics = self.backend.shims.capability(Diagnostics)
        return dict(diagnostics.fallback_ops()) if diagnostics is not None else {}

    def check(self) -> None:
        if self.facts.fallback != "counters":
            return
        counts = {op: n for op, n in self._counts().items() if op not in HOST_READS}
        new = {op: n - self.seen.get(op, 0) for op, n in counts.items() if n > self.seen.get(op, 0)}
        self.seen = counts
        if not new:
            return
        where = {op: self.lines.line_of(op) if self.lines is not None else None for op in new}
        listed = "; ".join(f"{op} ({n}x){f' at {where[op]}' if where[op] else ''}" for op, n in sorted(new.items()))
        raise CpuFallbackError(
            f"Strict mode: {len(new)} op(s) ran on the CPU instead of {self.backend.name} in this step: {listed}.",
            "Replace the op with one the device lowers, move that computation out of the training step, or unset "
            "ANYDEVICE_STRICT to allow the fallback (`ad.fallback_ops()` lists them); `anydevice check` finds them "
            "before a run.",
            ops=where,
        )

    def close(self) -> None:
        if self.lines is not None:
            self.lines.close()
            self.lines = None


UNSET = "Unset ANYDEVICE_STRICT (or pass strict=False) to run with the fallback allowed"


def refusal(name: str, facts: CheckFacts) -> UnsupportedFeatureError:
    """Why strict mode refuses ``name`` (its plugin declares ``fallback="unknown"``) and what to use instead."""
    if facts.strict_refusal is not None:
        why, instead = facts.strict_refusal
        return UnsupportedFeatureError(f"Strict mode cannot watch {name}: {why}", f"{instead} {UNSET}.")
    return UnsupportedFeatureError(
        f"Strict mode cannot watch {name}: its plugin declares no way to notice an op that runs on the CPU.",
        f"{UNSET}, or ask the plugin's maintainers to declare CheckFacts.fallback (counters, warnings or never).",
    )


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""anydevice's package folder (this module is ``anydevice/runtime/strict.py``)."""


def _shim_folders() -> tuple[str, ...]:
    """Where ``anydevice.shims`` lives (its own top-level folder in a source checkout), found without importing it."""
    spec = importlib.util.find_spec("anydevice.shims")
    return tuple(folder + os.sep for folder in (spec.submodule_search_locations or ())) if spec else ()


@functools.cache
def _stdlib() -> tuple[str, ...]:
    """Python's own library folder(s): ``contextlib``'s ``__enter__`` or ``functools``' wrapper is never the user's line."""
    import sysconfig

    return tuple(dict.fromkeys(os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")))


_PACKAGES = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def user_line(skip: tuple[str, ...] = ()) -> str | None:
    """``file:line`` of the innermost frame outside torch, anydevice, Python's library and ``skip`` (the user's code), or None.

    Installed packages other than torch count as the user's (a Hugging Face model's line is where its op runs),
    even when they are installed under Python's library folder.
    """
    import torch

    internal = (os.path.dirname(torch.__file__), _OWN + os.sep, *_shim_folders(), *skip)
    stdlib = _stdlib()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        library = name.startswith(stdlib) and not any(p in name for p in _PACKAGES)
        if not name.startswith(internal) and not name.startswith("<") and not library:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _base(op: str) -> str:
    """``aten::median.dim_values`` -> ``aten::median`` (fallback counters name overloads, calls name packets)."""
    return op.split(".", 1)[0]


def _mode_base() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


class _FallbackLines:
    """Where ops on ``device_type`` tensors without a ``dispatch_key`` kernel are first called (others: a lookup)."""

    def __init__(self, dispatch_key: str, device_type: str) -> None:
        import torch

        self.key = dispatch_key
        self.device_type = device_type
        self.lines: dict[str, str | None] = {}
        self._has: dict[str, bool] = {}
        self._has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
        watcher = self

        class Mode(_mode_base()):  # type: ignore[misc]  # a base chosen at run time (TorchDispatchMode, imported lazily)
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if any(getattr(getattr(a, "device", None), "type", None) == watcher.device_type for a in args):
                    watcher.note(func.name())
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.entered = False

    def note(self, name: str) -> None:
        has = self._has.get(name)
        if has is None:
            has = self._has[name] = bool(self._has_kernel(name, self.key) or self._has_kernel(name, "CompositeImplicitAutograd"))
        if not has and _base(name) not in self.lines:
            self.lines[_base(name)] = user_line()

    def line_of(self, op: str) -> str | None:
        return self.lines.get(_base(op))

    def __enter__(self) -> None:
        self.mode.__enter__()
        self.entered = True

    def close(self) -> None:
        if self.entered:
            self.entered = False
            try:
                self.mode.__exit__(None, None, None)
            except (AssertionError, RuntimeError, IndexError):  # another mode sits above ours: leave the stack as it is
                pass
