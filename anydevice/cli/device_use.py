"""No silent CPU run: the line a rank says at exit when it was asked for a device and never used it.

``ANYDEVICE=xla anydevice run script.py`` of a program that finds its device itself (``torch.accelerator``,
Lightning Fabric's ``"auto"``) trains on the CPU: torch_xla is no ``torch.accelerator`` device, and nothing
in the program imports it. The device was never used when none of its vendor modules
(``DeviceSpec.vendor_modules``, such as ``torch_xla``) was imported by the end of the run, since a tensor
cannot reach the device without them; the rank then says so, why, and how to fix it.
Devices torch finds itself (cuda, mps, xpu; no vendor module) and the host are never reported.
"""

from __future__ import annotations

import sys


def asked_device(value: str) -> str | None:
    """The one device ``ANYDEVICE`` names (``"xla"`` for ``xla:0``), or None (unset, ``auto``, a list)."""
    text = value.strip().lower()
    if not text or "," in text or text == "auto":
        return None
    return text.partition(":")[0] or None


def never_used_line(value: str, compat: bool) -> str | None:
    """The exit line for a run with ``ANYDEVICE=value`` that never imported the device's vendor modules, or None."""
    name = asked_device(value)
    if name is None or "torch" not in sys.modules:
        return None
    from anydevice.runtime.registry import builtin_registry

    registry = builtin_registry()
    canonical = registry.canonical(name)
    if canonical is None:
        return None
    modules = registry.get(canonical).spec.vendor_modules
    if not modules or any(module in sys.modules for module in modules):
        return None
    fix = (
        "the program imports torch through a path cuda-compat does not see; place tensors with ad.device()"
        if compat
        else f"run it with `anydevice run --cuda-compat` (torch.accelerator and CUDA calls then name {canonical}), "
        "or place tensors with ad.device()"
    )
    return (
        f"anydevice: ANYDEVICE={value.strip()} was asked for, but this process never used {canonical}: "
        f"{' and '.join(modules)} was never imported, so it ran on the CPU. Code that finds its device itself "
        f'(torch.accelerator, Lightning Fabric\'s "auto") does not find {canonical}; {fix}.'
    )
