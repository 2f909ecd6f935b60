"""What makes Hugging Face Transformers, Trainer and Accelerate follow ``ANYDEVICE``: environment, optimizer, device map.

No side effect at import: ``anydevice run`` calls :func:`launch_env` (parent, several processes) and
:func:`install_in_rank` (each rank, when it first imports one of :data:`WATCHED`);
:mod:`anydevice.integrations.transformers` calls :func:`install`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anydevice.backend import Backend

from anydevice.optimizers import fused_optimizer_supported as fused_optimizer_supported

WATCHED = ("transformers", "accelerate", "diffusers")
"""Libraries that read :func:`environment` at import: too late once one of them is imported."""
FUSED, UNFUSED = "adamw_torch_fused", "adamw_torch"
_VARIABLES = ("USE_TORCH_XLA", "ACCELERATE_USE_CPU")
"""What :func:`environment` sets."""
_PATCHED_MODULE = "transformers.training_args"
_said: set[str] = set()


def _say(line: str) -> None:
    """One stderr line, once per process."""
    if line not in _said:
        _said.add(line)
        sys.stderr.write(f"anydevice: transformers: {line}\n")


def environment(backend: Backend | None = None) -> dict[str, str]:
    """The variables Accelerate/Transformers read at import, with the values that make them pick the selected device.

    From what the plugin's placement shim declares: a lazy device (``Placement.lazy``, torch_xla) puts them
    in torch_xla mode (``USE_TORCH_XLA=1``; the runtime variable is already in the environment, set by the
    plugin's ``prepare_environment``); the host CPU (``Placement.host``) needs ``ACCELERATE_USE_CPU=1`` (else
    Accelerate runs no process group on it); any other device is native torch, even where torch_xla is installed.
    """
    from anydevice.backend import current

    placement = (backend or current()).shims.placement
    return {
        "USE_TORCH_XLA": "1" if placement.lazy else "0",
        "ACCELERATE_USE_CPU": "1" if placement.host else "0",
    }


def launch_env(backend: Backend) -> dict[str, str]:
    """For ``anydevice run``: what every child needs before its script imports Transformers."""
    return environment(backend)


def apply_environment(backend: Backend | None = None) -> dict[str, str]:
    """Set :func:`environment` in ``os.environ``; returns what it set. A user's other value is replaced, and said."""
    values = environment(backend)
    changed = {k: v for k, v in values.items() if os.environ.get(k) != v}
    late = [m for m in WATCHED if m in sys.modules]
    if changed and late:
        _say(
            f"{', '.join(late)} was imported before anydevice.integrations.transformers and may have picked its "
            "device already: import anydevice.integrations.transformers first (or start with `anydevice run`)"
        )
    for key, value in changed.items():
        old = os.environ.get(key)
        if old is not None:
            _say(f"{key}={old} replaced by {key}={value} to follow ANYDEVICE")
        os.environ[key] = value
    return values


def fix_optimizer(args: Any) -> None:
    """Replace ``adamw_torch_fused`` by ``adamw_torch`` in TrainingArguments ``args`` where the device lacks fused kernels."""
    optim: Any = getattr(args, "optim", None)
    if str(getattr(optim, "value", optim)) != FUSED:
        return
    device = args.device
    if fused_optimizer_supported(device):
        return
    args.optim = type(optim)(UNFUSED) if not isinstance(optim, str) else UNFUSED
    _say(f"optim='{FUSED}' has no fused kernel on {device.type}: using optim='{UNFUSED}' (pass optim= to choose another)")


def patch(module: ModuleType) -> None:
    """Make ``module.TrainingArguments`` (``transformers.training_args``) fix its optimizer after ``__post_init__``."""
    cls = module.TrainingArguments
    if getattr(cls.__post_init__, "_anydevice", False):
        return
    original = cls.__post_init__

    def __post_init__(self: Any) -> None:
        original(self)
        fix_optimizer(self)

    __post_init__._anydevice = True  # type: ignore[attr-defined]
    cls.__post_init__ = __post_init__


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then :func:`patch`."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``transformers.training_args`` with the other finders and wraps its loader (imports nothing itself)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _PATCHED_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install_import_hook() -> None:
    """Patch Trainer's optimizer choice when ``transformers.training_args`` is imported (now, if it already is)."""
    if _PATCHED_MODULE in sys.modules:
        patch(sys.modules[_PATCHED_MODULE])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def install_in_rank() -> None:
    """In a rank of ``anydevice run``, at the first import of a :data:`WATCHED` library (``cli.rank_start``).

    Sets :func:`environment` where the launcher did not (one process: its parent loads no shims), then
    :func:`install_import_hook`.
    """
    if not all(key in os.environ for key in _VARIABLES):
        apply_environment()
    install_import_hook()


def install(backend: Backend | None = None) -> dict[str, str]:
    """Set the environment (:func:`apply_environment`) and :func:`install_import_hook`; safe to repeat."""
    values = apply_environment(backend)
    install_import_hook()
    return values


def device_map() -> dict[str, str]:
    """``from_pretrained(device_map=...)`` for this process (:func:`anydevice.device_map`)."""
    from anydevice.api import device_map as ad_device_map

    return ad_device_map()
