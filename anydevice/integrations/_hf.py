"""What makes Hugging Face Transformers, Trainer and Accelerate follow ``ANYDEVICE``: environment, optimizer, device map
(``from_pretrained(device_map="auto")`` means the selected device).

No side effect at import: ``anydevice run`` calls :func:`launch_env` (parent, several processes) and
:func:`install_in_rank` (each rank, when it first imports one of :data:`WATCHED`);
:mod:`anydevice.integrations.transformers` calls :func:`install`.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend

from anydevice.runtime.optimizers import fused_optimizer_supported as fused_optimizer_supported

WATCHED = ("transformers", "accelerate", "diffusers")
"""Libraries that read :func:`environment` at import: too late once one of them is imported."""
FUSED, UNFUSED = "adamw_torch_fused", "adamw_torch"
_VARIABLES = ("USE_TORCH_XLA", "ACCELERATE_USE_CPU")
"""What :func:`environment` sets."""
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
    from anydevice.runtime.backend import current

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

    __post_init__.__dict__["_anydevice"] = True  # marks our patch (a function attribute mypy cannot see)
    cls.__post_init__ = __post_init__


def auto_device_map() -> str | dict[str, str]:
    """What ``device_map="auto"`` becomes under anydevice: this process's device (:func:`device_map`), or ``"auto"``.

    ``"auto"`` stays (Accelerate shards the model over the visible devices) only in one process, for a
    device selected without an index, with several visible, that Accelerate itself counts
    (:func:`accelerate_spreads`). Anywhere else Accelerate would pick the CPU or every rank's device 0.
    """
    from anydevice import distributed
    from anydevice.runtime.backend import current

    backend = current()
    placement = backend.shims.placement
    several = backend.index is None and distributed.world_size() == 1 and placement.device_count() > 1
    if several and accelerate_spreads(placement.device_type):
        return "auto"
    return device_map()


def accelerate_spreads(device_type: str) -> bool:
    """True when Accelerate's ``device_map="auto"`` counts several devices of ``device_type`` (torch's current accelerator)."""
    import torch
    from accelerate.utils import get_max_memory

    accelerator = torch.accelerator.current_accelerator()
    counted = [key for key in get_max_memory() if isinstance(key, int)]  # the accelerator's devices it found
    return accelerator is not None and accelerator.type == device_type and len(counted) > 1


def patch_from_pretrained(module: ModuleType) -> None:
    """Make ``module.PreTrainedModel.from_pretrained`` (``transformers.modeling_utils``) read ``device_map="auto"``
    as :func:`auto_device_map`."""
    cls = module.PreTrainedModel
    original = cls.__dict__["from_pretrained"].__func__
    if getattr(original, "_anydevice", False):
        return

    @functools.wraps(original)
    def from_pretrained(klass: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("device_map"), str) and kwargs["device_map"] == "auto":
            kwargs["device_map"] = auto_device_map()
        return original(klass, *args, **kwargs)

    from_pretrained.__dict__["_anydevice"] = True  # marks our patch
    cls.from_pretrained = classmethod(from_pretrained)


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "transformers.training_args": patch,
    "transformers.modeling_utils": patch_from_pretrained,
}
"""The modules the import hook patches when they are imported, and how."""


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the module's patch (:data:`PATCHES`)."""

    def __init__(self, loader: importlib.abc.Loader, patcher: Callable[[ModuleType], None]) -> None:
        self.loader, self.patcher = loader, patcher

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.patcher(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`PATCHES` with the other finders and wraps their loaders (imports nothing itself)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patcher = PATCHES.get(fullname)
        if patcher is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patcher)
                return spec
        return None


def install_import_hook() -> None:
    """Patch Trainer's optimizer choice and ``from_pretrained(device_map="auto")`` when transformers imports them
    (now, for what is already imported)."""
    for name, patcher in PATCHES.items():
        if name in sys.modules:
            patcher(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
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
