"""The start-up hook's logic: enable cuda-compat at the script's first ``import torch`` (see :mod:`anydevice.startup`)."""

from __future__ import annotations

import os
import sys
from typing import Any

VARIABLE = "ANYDEVICE_CUDA_COMPAT"
_said: set[str] = set()


def exempted() -> bool:
    """Whether this process called :func:`anydevice.startup.exempt` (read from the loaded module: no import)."""
    startup = sys.modules.get("anydevice.startup")
    return bool(getattr(startup, "exempted", False))


def _say(line: str) -> None:
    if line in _said:
        return
    _said.add(line)
    try:
        sys.stderr.write(f"anydevice: {line}\n")
    except (OSError, ValueError, AttributeError):  # closed or missing stderr: nothing to say it on
        pass


def requested() -> bool:
    """Whether ``ANYDEVICE_CUDA_COMPAT`` asks for cuda-compat; a value that is not yes/no is said once and means off."""
    from anydevice import settings
    from anydevice.errors import AnyDeviceError

    try:
        return bool(settings.ANYDEVICE_CUDA_COMPAT.flag())
    except AnyDeviceError as exc:
        raw = os.environ.get(VARIABLE, "")
        _say(f"{VARIABLE}={raw!r} is not a yes/no value (1 or 0); cuda-compat is off. {exc.hint or ''}".strip())
        return False


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
    """Enable cuda-compat (the import hook's first non-internal ``import torch``); never raises into the import."""
    from anydevice.cuda_compat.scope import installed_hook

    hook = installed_hook()
    if exempted():
        return None
    if _anydevice_is_running():
        if hook is not None:
            hook.waiting = True  # the script's next import of torch enables it
        return None
    try:
        from anydevice.cuda_compat import control

        control.enable()
        active = control._active
    except Exception as exc:  # said on stderr: the script's import of torch must go on
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _say(f"cuda-compat could not take effect: {first}; torch is untouched.")
        return None
    return active.scope if active is not None else None


def install() -> None:
    """Enable cuda-compat at the script's first ``import torch``, or now if torch is imported already.

    The ``.pth`` line calls this at interpreter start; ``import anydevice.cuda_compat`` calls it too.
    """
    if exempted() or not requested():
        return
    from anydevice.cuda_compat.scope import ImportHook, installed_hook, torch_loaded

    if installed_hook() is None:
        ImportHook(_on_torch).install()
    if torch_loaded() and not _anydevice_is_running():
        hook = installed_hook()
        if hook is not None and hook.scope is None and hook.waiting:
            hook.waiting = False
            hook.scope = _on_torch()
