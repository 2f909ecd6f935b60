"""Import paths of 0.3 that moved in 0.4: they keep working for one release, with a ``DeprecationWarning``.

``import anydevice.registry`` gives the very module ``anydevice.runtime.registry`` (so patching one patches
the other); docs/architecture.md lists where each module lives now. Nothing here is imported by anydevice's
own code, which uses the new paths (tests/core/test_layering.py checks it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

MOVED: dict[str, tuple[str, ...]] = {
    **{
        f"anydevice.{m}": (f"anydevice.contract.{m}",)
        for m in ("device_spec", "hookspecs", "diagnosis", "check_facts", "detect", "versions")
    },
    **{
        f"anydevice.{m}": (f"anydevice.runtime.{m}",)
        for m in (
            "selection",
            "registry",
            "backend",
            "guard",
            "loading",
            "autoload",
            "isolation",
            "vet_child",
            "untrusted",
            "strict",
            "optimizers",
        )
    },
    **{f"anydevice.{m}": (f"anydevice.files.{m}",) for m in ("safe_files", "safe_place", "publish")},
    **{f"anydevice.{m}": (f"anydevice.checkpoint.{m}",) for m in ("saving", "dcp_reading")},
    "anydevice.slurm_env": ("anydevice.distributed.slurm",),
    "anydevice.capabilities": ("anydevice.capability_query",),
    "anydevice.device_module": ("anydevice.shims.cuda_shaped", "anydevice.api"),
    "anydevice.shims.device_modules": ("anydevice.shims.cuda_shaped",),
}
"""Old module name -> where its names live now (several: the first that has a name serves it)."""


_creating: set[str] = set()
"""Old names being served now."""


def _warn(old: str, new: Sequence[str]) -> None:
    where = " and ".join(new)
    warnings.warn(f"{old} moved to {where} in anydevice 0.4; the old path goes away in 0.5", DeprecationWarning, stacklevel=3)


class _Joined(types.ModuleType):
    """An old module whose names now live in several modules.

    Also an old module named like a function of the package (``anydevice.backend``, ``anydevice.device_module``):
    importing it makes Python bind the package's attribute to the module, over the function (``ad.backend``,
    ``ad.device_module``); so the module, called, is that function.
    """

    def __init__(self, name: str, targets: Sequence[str], call: Callable[..., Any] | None) -> None:
        super().__init__(name)
        self._targets = tuple(targets)
        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._call is None:
            raise TypeError(f"module {self.__name__!r} is not callable")
        return self._call(*args, **kwargs)

    def __getattr__(self, attr: str) -> object:
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")


class _OldPathLoader(importlib.abc.Loader):
    def __init__(self, targets: Sequence[str]) -> None:
        self.targets = targets
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        _warn(spec.name, self.targets)
        package, _, attr = spec.name.rpartition(".")
        _creating.add(spec.name)  # the package's __getattr__ may import this name again: not through here
        try:
            shadowed = getattr(sys.modules.get(package), attr, None)
        finally:
            _creating.discard(spec.name)
        if len(self.targets) > 1 or (callable(shadowed) and not isinstance(shadowed, types.ModuleType)):
            return _Joined(spec.name, self.targets, shadowed if callable(shadowed) else None)
        module = importlib.import_module(self.targets[0])
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module is the new one, whose own spec the import machinery just overwrote."""
        if not isinstance(module, _Joined):
            module.__spec__ = self.own_spec


class _OldPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        targets = MOVED.get(fullname)
        if targets is None or fullname in _creating:
            return None
        return importlib.machinery.ModuleSpec(fullname, _OldPathLoader(targets))


def install() -> None:
    """Serve the old paths (once per process; importing this module does it, as ``import anydevice`` does)."""
    if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPathFinder())


install()
