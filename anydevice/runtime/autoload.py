"""Keeping torch's backend autoload from importing vendor packages nobody selected.

torch imports every ``torch.backends`` entry point (torch_tpu, TorchNeuron) at ``import torch``:
seconds of import time and patched torch globals, even for a CPU run. Where anydevice starts the
process (the CLI, ``anydevice run``), it sets ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` unless the
selection may need an autoloaded device. Plugins of such devices load their package explicitly
when selected, so turning autoload off never breaks them. Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from anydevice import settings
from anydevice.errors import SelectionError
from anydevice.runtime.registry import Registry, get_registry
from anydevice.runtime.selection import parse


def needs_autoload(selection: str, registry: Registry | None = None) -> bool:
    """True when ``selection`` may resolve to a device whose backend torch autoloads.

    A named device decides by its plugin's ``autoload_module``; ``auto`` and lists keep autoload
    only if such a device is available by its cheap detection (which imports no torch).
    """
    registry = registry or get_registry()
    try:
        request = parse(selection)
    except SelectionError:
        return False  # the selection itself will fail with a clear error later
    names = [registry.canonical(item.name) for item in request.items] if request.items else registry.names()
    for name in names:
        if name is None:
            continue
        spec = registry.get(name).spec
        if spec.autoload_module is None:
            continue
        if len(names) == 1 or registry.detect(name).available:
            return True
    return False


def apply(env: MutableMapping[str, str] | None = None, selection: str | None = None) -> bool:
    """Set ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` in ``env`` (default: this process) when not needed.

    Leaves autoload on with ``ANYDEVICE_KEEP_AUTOLOAD=1``, and off where it already is. An inherited
    ``TORCH_DEVICE_BACKEND_AUTOLOAD=1`` is not taken as a choice: torch writes that value into the
    environment of every process that imported it, so children of any torch program carry it.
    Returns True when it turned autoload off. Must run before torch is imported to affect this process.
    """
    target = os.environ if env is None else env
    current = (target.get(settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name) or "").strip().lower()
    if current in ("0", "false", "off", "no") or settings.ANYDEVICE_KEEP_AUTOLOAD.flag():
        return False
    request = selection or target.get(settings.ANYDEVICE.name) or "auto"
    if needs_autoload(request):
        return False
    target[settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name] = "0"
    if env is None:
        global _applied_here, _replaced
        _applied_here, _replaced = True, current or None
    return True


_applied_here = False
_replaced: str | None = None


def applied_here() -> bool:
    """True when :func:`apply` turned autoload off in this process's environment."""
    return _applied_here


def replaced_value() -> str | None:
    """The ``TORCH_DEVICE_BACKEND_AUTOLOAD`` value :func:`apply` replaced in this process, if any."""
    return _replaced
