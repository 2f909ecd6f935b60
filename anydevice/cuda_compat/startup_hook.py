"""The start-up hook's logic: enable cuda-compat at the script's first ``import torch`` (see :mod:`anydevice.startup`)."""

from __future__ import annotations

import sys
from typing import Any

VARIABLE = "ANYDEVICE_CUDA_COMPAT"


def exempted() -> bool:
    """Whether this process called :func:`anydevice.startup.exempt` (read from the loaded module: no import)."""
    startup = sys.modules.get("anydevice.startup")
    return bool(getattr(startup, "exempted", False))


def requested() -> bool:
    """Whether ``ANYDEVICE_CUDA_COMPAT`` asks for cuda-compat; a value that is not yes/no raises :class:`AnyDeviceError`."""
    from anydevice import settings

    return bool(settings.ANYDEVICE_CUDA_COMPAT.flag())


def _anydevice_is_running() -> bool:
    """Whether anydevice's own code is on the stack (torch imported from inside a selection): read once, at enabling."""
    frame: Any = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("anydevice.") and not name.startswith(("anydevice.startup", "anydevice.cuda_compat")):
            return True
        frame = frame.f_back
    return False


def _on_torch() -> Any:
    """Enable cuda-compat (the import hook's first non-internal ``import torch``).

    A device that cannot be selected (``ANYDEVICE`` that does not parse, a device that is not usable) is
    raised into the script's ``import torch``: cuda-compat was asked for, so running without it would be a
    silent fallback.
    """
    from anydevice.cuda_compat.scope import installed_hook

    hook = installed_hook()
    if exempted():
        return None
    if _anydevice_is_running():
        if hook is not None:
            hook.waiting = True  # the script's next import of torch enables it
        return None
    from anydevice.cuda_compat import control

    control.enable()
    active = control._active
    return active.scope if active is not None else None


def _refuse(error: Exception) -> Any:
    """An ``on_torch`` that refuses every ``import torch`` of the script (a bad ``ANYDEVICE_CUDA_COMPAT``).

    Each import ends the program with one line naming the value and the fix (:class:`SystemExit`: no
    traceback), the first and every later one alike: a program that catches the first cannot go on with
    cuda-compat silently off.
    """
    line = "anydevice: " + " ".join(str(error).split("\n"))

    def on_torch() -> Any:
        if exempted():
            return None
        from anydevice.cuda_compat.scope import installed_hook

        hook = installed_hook()
        if hook is not None:
            hook.waiting = True  # the next import of torch is refused too
        raise SystemExit(line)

    return on_torch


def install() -> None:
    """Enable cuda-compat at the script's first ``import torch``, or now if torch is imported already.

    The ``.pth`` line calls this at interpreter start; ``import anydevice.cuda_compat`` calls it too. A value
    of ``ANYDEVICE_CUDA_COMPAT`` that is not yes/no refuses each ``import torch`` of the script with one line
    (:func:`_refuse`; not at interpreter start, where every Python program of the environment would die of it).
    """
    from anydevice.errors import AnyDeviceError

    if exempted():
        return
    on_torch = _on_torch
    try:
        if not requested():
            return
    except AnyDeviceError as exc:
        on_torch = _refuse(exc)
    from anydevice.cuda_compat.scope import ImportHook, installed_hook, torch_loaded

    if installed_hook() is None:
        ImportHook(on_torch).install()
    if torch_loaded() and not _anydevice_is_running():
        hook = installed_hook()
        if hook is not None:
            hook.decide()
