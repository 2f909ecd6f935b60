"""Interpreter start-up hook for ``ANYDEVICE_CUDA_COMPAT=1 python script.py`` (no edit to the script).

``anydevice-cuda-compat.pth`` (installed beside the package) calls :func:`install` only when the
variable is set; unset, the line costs one environment lookup and imports nothing. :func:`install`
imports no torch: it waits for the script's ``import torch`` and enables cuda-compat right after it,
so ``mp.spawn`` children and torchrun ranks (which inherit the variable) are covered too. anydevice's
own command line (the ``anydevice run`` parent) is left alone; its ranks enable it themselves.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType


def _is_anydevice_cli() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0) == "anydevice" or argv0.endswith(os.path.join("anydevice", "__main__.py"))


def _enable() -> None:
    from anydevice import settings

    if settings.ANYDEVICE_CUDA_COMPAT.flag() and not _is_anydevice_cli():
        import anydevice.cuda_compat

        anydevice.cuda_compat.enable()


class _EnablingLoader(importlib.abc.Loader):
    """Runs torch's own loader, then enables cuda-compat."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader  # torch sees its own loader again
        module.__loader__ = self.loader
        _enable()


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds ``torch`` with the other finders and wraps its loader; removes itself once used."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _EnablingLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Enable cuda-compat right after ``import torch`` (now, if torch is already imported)."""
    if "torch" in sys.modules:
        _enable()
    elif not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
