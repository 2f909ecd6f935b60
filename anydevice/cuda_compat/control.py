"""Turning cuda-compat on and off in this process, and its report (the public functions of :mod:`anydevice.cuda_compat`)."""

from __future__ import annotations

import atexit
import os
import site
import sys
import sysconfig
from typing import TYPE_CHECKING

from anydevice import settings

if TYPE_CHECKING:
    from anydevice.cuda_compat.redirect import Redirect
    from anydevice.cuda_compat.scope import Scope

_active: Redirect | None = None
"""cuda-compat's redirect (CUDA calls and the device-agnostic half), if on."""
_agnostic: Redirect | None = None
"""The device-agnostic half alone (``anydevice run`` without ``--cuda-compat``), if on: one redirect per process."""
_exit_registered = False
_lines_wanted = False


def enable() -> bool:
    """Redirect CUDA calls to the selected device now; False when it is cuda itself (nothing to do)."""
    global _active, _exit_registered
    if _active is not None:
        return True
    from anydevice.api import device_module
    from anydevice.cuda_compat.install import install, summary
    from anydevice.runtime import refusals
    from anydevice.runtime.backend import current

    backend = current()
    disable_agnostic()  # one redirect: cuda-compat's includes the device-agnostic half
    _active = install(backend, device_module())
    refusals.install()  # a refusal raised for the script's code ends it as one clear error, not a traceback
    if _active is not None and _lines_wanted:
        _active.report.record_lines()
    if _loud():
        line = (
            summary(_active)
            if _active
            else f"anydevice: cuda-compat: the selected device is {backend.name}; nothing to redirect."
        )
        sys.stderr.write(line + "\n")
    if _active is not None and _active.scope.rebound:
        _say_late(_active)
    if _active is not None and not _exit_registered:
        atexit.register(_write_report)
        _exit_registered = True
    return _active is not None


def disable() -> None:
    """Put back everything :func:`enable` patched, and the real torch modules where views were bound."""
    global _active
    from anydevice.runtime import refusals

    refusals.uninstall()
    if _active is not None:
        from anydevice.cuda_compat.install import uninstall

        uninstall(_active)
        _active = None


def enabled() -> bool:
    """Whether CUDA calls are being redirected in this process."""
    return _active is not None


def report() -> dict[str, object]:
    """This process's migration report so far: ``{"device", "calls": [{"call", "kind", "outcome"}]}``.

    After :func:`record_lines` each call also has ``"line"``: where user code first made it (or None).
    """
    return _active.report.as_json() if _active is not None else {"device": None, "calls": []}


def record_lines() -> None:
    """From now on (or from :func:`enable` on) the report keeps each distinct call's first ``file:line`` in user code.

    ``anydevice check`` asks for it; a plain run does not read a frame.
    """
    global _lines_wanted
    _lines_wanted = True
    if _active is not None:
        _active.report.record_lines()


LATE_SHOWN = 6
"""How many names the late-enable line lists of each kind."""


def _say_late(active: Redirect) -> None:
    """Once, on rank 0: cuda-compat was enabled after the program's own code bound torch's names; which were rebound,
    and which references (default arguments, closures, class attributes) still hold the real torch."""
    rebound = [f"{module.__name__}.{key}" for module, key in active.scope.rebound if _programs(module)]
    if not rebound or (settings.RANK.get() or "0") != "0":
        return

    def shown(names: list[str]) -> str:
        more = f" and {len(names) - LATE_SHOWN} more" if len(names) > LATE_SHOWN else ""
        return ", ".join(names[:LATE_SHOWN]) + more

    modules = [m for m in {id(m): m for m in list(sys.modules.values())}.values() if _programs(m)]
    held = active.scope.held_elsewhere(modules)
    stays = (
        f"still the real torch, CUDA calls not redirected: {shown(held)}"
        if held
        else "references held elsewhere (objects, containers, local variables) still call the real torch"
    )
    sys.stderr.write(
        f"anydevice: cuda-compat was enabled after the program bound torch's names: rebound now: "
        f"{shown(list(dict.fromkeys(rebound)))}; {stays}. Enable it before the program imports torch (`anydevice run "
        "--cuda-compat`, ANYDEVICE_CUDA_COMPAT=1, or cuda_compat.enable() first).\n"
    )


def _programs(module: object) -> bool:
    """Whether ``module`` is the program's own code: ``__main__``, or a file outside Python's library and the
    installed packages (a library's module is not, nor one without a file: torch's generated ones)."""
    if getattr(module, "__name__", None) == "__main__":
        return True
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return False
    real = os.path.realpath(path)
    return not any(real.startswith(folder + os.sep) for folder in _LIBRARY_FOLDERS)


_LIBRARY_FOLDERS = tuple(
    {
        os.path.realpath(folder)
        for folder in (*sysconfig.get_paths().values(), *site.getsitepackages(), site.getusersitepackages())
        if folder
    }
)
"""Python's library and the installed packages (a module with no file, as torch's generated ones, is not the program's)."""


def _loud() -> bool:
    return not settings.ANYDEVICE_QUIET.flag() and (settings.RANK.get() or "0") == "0"


def _write_report() -> None:
    from anydevice.cuda_compat.migration_report import write_at_exit

    if _active is not None:
        write_at_exit(
            _active.report, settings.ANYDEVICE_CUDA_COMPAT_REPORT.get(), settings.RANK.get(), settings.ANYDEVICE_QUIET.flag()
        )


def enable_agnostic() -> Scope | None:
    """Put the device-agnostic views in place for the selected device; its scope, or None where torch already answers.

    One redirect per process: nothing when cuda-compat (which includes all of this) or this is already active.
    """
    global _agnostic
    if _agnostic is not None:
        return _agnostic.scope
    if _active is not None:
        return None
    from anydevice.api import device_module
    from anydevice.cuda_compat.install import install
    from anydevice.runtime.backend import current

    backend = current()
    placement = backend.shims.placement
    if placement.host or _torch_knows(placement.device().type):
        return None
    _agnostic = install(backend, device_module(), cuda=False)
    if _agnostic is None:
        return None
    if not settings.ANYDEVICE_QUIET.flag() and (settings.RANK.get() or "0") == "0":
        sys.stderr.write(
            f"anydevice: torch.accelerator, torch.get_device_module and torch.Generator answer for {_agnostic.name} "
            f"({_agnostic.target}); CUDA calls are not mapped (that is --cuda-compat).\n"
        )
    return _agnostic.scope


def disable_agnostic() -> None:
    """Take the device-agnostic views and patches out again (:func:`enable` calls this first)."""
    global _agnostic
    if _agnostic is not None:
        from anydevice.cuda_compat.install import uninstall

        uninstall(_agnostic)
        _agnostic = None


def agnostic_active() -> Redirect | None:
    """The device-agnostic redirect in place, if any."""
    return _agnostic


def _torch_knows(device_type: str) -> bool:
    """Whether torch's own ``torch.accelerator`` already names ``device_type`` (cuda, mps, xpu): nothing to answer."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return False
    found = accelerator.current_accelerator()
    return found is not None and found.type == device_type
