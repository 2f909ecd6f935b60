"""CUDA-written scripts, unmodified, on the selected device (opt-in).

    anydevice run --cuda-compat script.py        # any number of processes: -n 2
    ANYDEVICE_CUDA_COMPAT=1 python script.py     # no edit, no import: the start-up hook enables it at `import torch`

With ``ANYDEVICE_CUDA_COMPAT=1``, the script's ``import torch`` (or importing this module) selects the
device (``ANYDEVICE``) and maps CUDA calls onto it: ``.cuda()``, ``device="cuda"``, ``torch.cuda.*``
(through :func:`anydevice.device_module`), ``torch.accelerator``, ``torch.autocast("cuda")``,
``GradScaler``, ``"nccl"``, ``torch.load`` of GPU checkpoints, pinned memory, fused optimizers,
lazy-device step boundaries. One line on stderr says it is active and on which device; at exit a
report lists every distinct CUDA call and what it became (``ANYDEVICE_CUDA_COMPAT_REPORT=path`` also
writes it as JSON). Without the variable torch is left untouched; on cuda nothing is redirected.
:func:`disable` undoes it.

Why this design (the long form is in docs/integrations.md). Its promises are invariants that
tests check: a program that never names CUDA computes bit-for-bit what it computes without
cuda-compat; every question a script asks gets one answer (eager, compiled, workers, children);
``Module.to("cuda")`` keeps Parameter and buffer objects. They hold by construction:

* **Who sees the device is decided per module, at import** (:mod:`.scope`): torch's own code keeps the
  real ``torch`` and is never told anything new; the script and its libraries hold a view whose
  ``torch.cuda``/``torch.accelerator`` answer for the selected device. No call reads a frame.
* **What everyone shares only maps arguments that name CUDA** (:mod:`.redirect`, :mod:`.runtime`):
  factories, ``.to()``, ``.cuda()``, ``torch.load``, autocast, ``"nccl"``. Called without CUDA in their
  arguments they call torch's original with the very same arguments.
"""

from __future__ import annotations

import atexit
import sys
from typing import TYPE_CHECKING

from anydevice import settings

if TYPE_CHECKING:
    from anydevice.cuda_compat.redirect import Redirect

__all__ = ["disable", "enable", "enabled", "report"]

_active: Redirect | None = None
_exit_registered = False


def enable() -> bool:
    """Redirect CUDA calls to the selected device now; False when it is cuda itself (nothing to do)."""
    global _active, _exit_registered
    if _active is not None:
        return True
    from anydevice.backend import current
    from anydevice.cuda_compat.install import install, summary
    from anydevice.device_module import device_module

    backend = current()
    _active = install(backend, device_module())
    if _loud():
        line = (
            summary(_active)
            if _active
            else f"anydevice: cuda-compat: the selected device is {backend.name}; nothing to redirect."
        )
        sys.stderr.write(line + "\n")
    if _active is not None and not _exit_registered:
        atexit.register(_write_report)
        _exit_registered = True
    return _active is not None


def disable() -> None:
    """Put back everything :func:`enable` patched, and the real torch modules where views were bound."""
    global _active
    if _active is not None:
        from anydevice.cuda_compat.install import uninstall

        uninstall(_active)
        _active = None


def enabled() -> bool:
    """Whether CUDA calls are being redirected in this process."""
    return _active is not None


def report() -> dict[str, object]:
    """This process's migration report so far: ``{"device", "calls": [{"call", "kind", "outcome"}]}``."""
    return _active.report.as_json() if _active is not None else {"device": None, "calls": []}


def _loud() -> bool:
    return not settings.ANYDEVICE_QUIET.flag() and (settings.RANK.get() or "0") == "0"


def _write_report() -> None:
    from anydevice.cuda_compat.report import write_at_exit

    if _active is not None:
        write_at_exit(
            _active.report, settings.ANYDEVICE_CUDA_COMPAT_REPORT.get(), settings.RANK.get(), settings.ANYDEVICE_QUIET.flag()
        )


from anydevice import startup  # noqa: E402 - the start-up hook, which imports this package first

if startup.requested():
    startup.install()  # now if torch is imported, else at the script's first `import torch`
elif not settings.ANYDEVICE_QUIET.flag():
    sys.stderr.write(
        "anydevice: cuda-compat is off: set ANYDEVICE_CUDA_COMPAT=1 (or use `anydevice run --cuda-compat`); torch is untouched.\n"
    )
