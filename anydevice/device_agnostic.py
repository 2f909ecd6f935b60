"""``anydevice run`` without ``--cuda-compat``: device-agnostic programs land on the selected device.

A program written the way PyTorch asks (``torch.accelerator``, ``torch.get_device_module``,
``torch.Generator(device=...)``, ``torch.inference_mode``) finds the device torch knows; torch 2.9 counts no
lazy XLA device (xla, tpu, neuron) as an accelerator, so such a program would train on the CPU. A rank of
``anydevice run`` calls :func:`install` before the script: at the script's first ``import torch`` the
device-agnostic half of cuda-compat's redirect is put in place (:mod:`anydevice.cuda_compat.accelerator`),
through the same import hook and views, so torch's own code keeps the real ``torch``. Nothing that names
CUDA is mapped (that stays ``--cuda-compat``'s door).

Only for a device torch does not find by itself (one with vendor modules, ``DeviceSpec.vendor_modules``): on
the host, cuda, mps and xpu nothing is installed and ``torch.accelerator`` stays torch's own answer.
This module imports neither torch nor a vendor package.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anydevice.cuda_compat.scope import Scope

VARIABLE = "ANYDEVICE"
RUNNER = "anydevice.runtime.script_main"
"""The module that runs the script (``anydevice run``'s ranks): frames above it are the script's."""
OWN = ("anydevice.device_agnostic", "anydevice.cuda_compat", "anydevice.startup")
importing = False
"""True while :func:`install` imports :mod:`anydevice.cuda_compat` (which then says nothing about being off)."""


def asked() -> str | None:
    """The one device ``ANYDEVICE`` names (``"xla"`` for ``xla:0``), or None (unset, ``auto``, a list, malformed: the
    selection reports that itself), read by the one device grammar (:func:`anydevice.runtime.selection.parse`)."""
    text = os.environ.get(VARIABLE, "")
    if not text.strip():
        return None
    from anydevice.errors import SelectionError
    from anydevice.runtime.selection import parse

    try:
        request = parse(text)
    except SelectionError:
        return None
    return request.items[0].name if len(request.items) == 1 else None


def install() -> None:
    """At the script's first ``import torch``: the device-agnostic API answers for the selected device (see module doc)."""
    global importing
    if not needs_views(asked()):
        return  # the host, cuda, mps, xpu: torch answers; cuda-compat's package is not even imported
    importing = True  # anydevice's own import of the package: its "cuda-compat is off" line is for a script's
    try:
        from anydevice.cuda_compat.scope import ImportHook, installed_hook, torch_loaded
    finally:
        importing = False

    if installed_hook() is None:
        ImportHook(_on_torch).install()
    if torch_loaded():
        hook = installed_hook()
        if hook is not None:
            hook.decide()


def _on_torch() -> Scope | None:
    """The hook's decision at the first non-internal ``import torch``: the scope of the views, or None (nothing to do)."""
    from anydevice.cuda_compat import startup_hook
    from anydevice.cuda_compat.scope import installed_hook

    if startup_hook.exempted():
        return None
    if _anydevice_is_running():
        hook = installed_hook()
        if hook is not None:
            hook.waiting = True  # the script's next import of torch decides
        return None
    from anydevice.cuda_compat import control

    return control.enable_agnostic()


def _anydevice_is_running() -> bool:
    """Whether anydevice's own code (not the script runner's) imports torch: ``ad.device()`` before the script's
    ``import torch``, a plugin loading its vendor package. The frames above the script runner are the script's."""
    frame: Any = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == RUNNER:
            return False
        if name.startswith("anydevice.") and not name.startswith(OWN):
            return True
        frame = frame.f_back
    return False


def needs_views(name: str | None) -> bool:
    """Whether device ``name`` is one torch does not find itself: it has vendor modules (torch_xla, ...)."""
    if name is None:
        return False
    from anydevice.runtime.registry import builtin_registry, get_registry

    builtin = builtin_registry()  # a built-in device torch finds itself: no third-party plugin loaded into the rank
    known = builtin.canonical(name)
    if known is not None and not builtin.get(known).spec.vendor_modules:
        return False
    registry = get_registry()  # the registry in use: a third-party plugin may provide the device
    canonical = registry.canonical(name)
    return canonical is not None and bool(registry.get(canonical).spec.vendor_modules)
