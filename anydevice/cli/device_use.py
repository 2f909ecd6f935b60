"""No silent CPU run: a rank says when the device it was asked for is not used, before the first step.

``ANYDEVICE=xla anydevice run script.py`` of a program that finds its device itself (``torch.accelerator``,
Lightning Fabric's ``"auto"``) trains on the CPU: torch_xla is no ``torch.accelerator`` device, and nothing
in the program imports it. The device is not used while none of its vendor modules
(``DeviceSpec.vendor_modules``, such as ``torch_xla``) is imported, since a tensor cannot reach the device
without them. Rank 0 says so, why, and how to fix it: before the program's first optimizer step
(:func:`watch_first_step`), or at its end when no step said it (:func:`never_used_line`).
Devices torch finds itself (cuda, mps, xpu; no vendor module) and the host are never reported.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

AT_EXIT = "this process never used {device}: {modules} was never imported, so it ran on the CPU"
"""What the exit line says happened."""
AT_FIRST_STEP = (
    "this process is not using {device}: {modules} is not imported at its first optimizer step, so this step runs on {where}"
)
"""What the first-step line says happens."""
_said_at_first_step = False


def asked_device(value: str) -> str | None:
    """The one device ``ANYDEVICE`` names (``"xla"`` for ``xla:0``), or None (unset, ``auto``, a list, malformed).

    Read by the one device grammar (:func:`anydevice.runtime.selection.parse`); a malformed value is the selection's
    own error to report, not this check's.
    """
    from anydevice.errors import SelectionError
    from anydevice.runtime.selection import parse

    try:
        request = parse(value)
    except SelectionError:
        return None
    return request.items[0].name if len(request.items) == 1 else None


def unused_device(value: str) -> tuple[str, tuple[str, ...]] | None:
    """The device ``ANYDEVICE=value`` names and its vendor modules, when it has some and none is imported; else None.

    Resolved through the registry in use (third-party plugins included), so a third-party device is covered too.
    """
    name = asked_device(value)
    if name is None or "torch" not in sys.modules:
        return None
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    canonical = registry.canonical(name)
    if canonical is None:
        return None
    modules = registry.get(canonical).spec.vendor_modules
    if not modules or any(module in sys.modules for module in modules):
        return None
    return canonical, modules


def unused_line(value: str, compat: bool, finding: str) -> str | None:
    """The line for ``ANYDEVICE=value`` when its device is not used (:func:`unused_device`), or None.

    ``finding`` (:data:`AT_EXIT`, :data:`AT_FIRST_STEP`) says what happened; why and the fix follow.
    """
    unused = unused_device(value)
    if unused is None:
        return None
    canonical, modules = unused
    fix = (
        "the program imports torch through a path cuda-compat does not see; place tensors with ad.device()"
        if compat
        else f"run it with `anydevice run --cuda-compat` (torch.accelerator and CUDA calls then name {canonical}), "
        "or place tensors with ad.device()"
    )
    what = finding.format(device=canonical, modules=" and ".join(modules))
    return (
        f"anydevice: ANYDEVICE={value.strip()} was asked for, but {what}. Code that finds its device itself "
        f'(torch.accelerator, Lightning Fabric\'s "auto") does not find {canonical}; {fix}.'
    )


def never_used_line(value: str, compat: bool) -> str | None:
    """The exit line of a run that never used its device, or None (also when its first step said it already)."""
    return None if _said_at_first_step else unused_line(value, compat, AT_EXIT)


def say_at_first_step(value: str, compat: bool, where: str = "cpu") -> None:
    """Write the :data:`AT_FIRST_STEP` line to stderr when the device is not used (then the exit line is not said);
    ``where``: the device type of the step's parameters."""
    global _said_at_first_step
    line = unused_line(value, compat, AT_FIRST_STEP.replace("{where}", "the CPU" if where == "cpu" else where))
    if line:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        _said_at_first_step = True


def watch_first_step(value: str, compat: bool) -> None:
    """Call :func:`say_at_first_step` before the program's first optimizer step (torch is imported).

    A global step pre-hook (``register_optimizer_step_pre_hook``: every optimizer) that checks once, never
    raises into the step, and removes itself (:func:`_leave`), so later steps cost nothing.
    """
    if asked_device(value) is None:
        return
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    checked = False
    owner = os.getpid()  # a forked child inherits the hook: its steps are not this process's first

    def before_first_step(optimizer: object, *_: object) -> None:
        nonlocal checked
        try:
            if not checked and os.getpid() == owner:
                checked = True
                say_at_first_step(value, compat, _step_device(optimizer))
            _leave(handle)
        except Exception:  # the program's step is what matters
            pass

    handle = register_optimizer_step_pre_hook(before_first_step)


def _step_device(optimizer: object) -> str:
    """The device type of the optimizer's first parameter ("cpu" when it has none)."""
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            return str(param.device.type)
    return "cpu"


def _leave(handle: RemovableHandle) -> None:
    """Remove ``handle``'s hook while torch iterates the hooks' dict, when that is safe.

    It is safe when the hook is the dict's last and the dict an ``OrderedDict`` (torch's): its iterator then
    just ends. Removing an earlier one, or from a plain dict, would raise into the step: the hook then stays,
    doing nothing, and leaves at a later step where it is the last.
    """
    hooks = handle.hooks_dict_ref()
    if type(hooks) is OrderedDict and next(reversed(hooks), None) == handle.id:
        handle.remove()
