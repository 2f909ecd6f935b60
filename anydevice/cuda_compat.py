"""CUDA-written scripts, unmodified, on the selected device (opt-in).

    anydevice run --cuda-compat script.py        # any number of processes: -n 2
    ANYDEVICE_CUDA_COMPAT=1 python script.py     # no edit, no import: the start-up hook enables it when torch is imported

With ``ANYDEVICE_CUDA_COMPAT=1``, importing this module (the start-up hook does it right after
``import torch``) selects the device (``ANYDEVICE``) and maps CUDA calls onto it: ``.cuda()``,
``device="cuda"``, ``torch.cuda.*`` (through :func:`anydevice.device_module`), ``torch.accelerator``,
``torch.autocast("cuda")``, ``GradScaler``, ``"nccl"``, ``torch.load`` of GPU checkpoints, pinned memory,
fused optimizers, lazy-device step boundaries. One line on stderr says it is active and on which
device; at exit a report lists every distinct CUDA call and what it became
(``ANYDEVICE_CUDA_COMPAT_REPORT=path`` also writes it as JSON). Without the variable torch is left
untouched; on cuda nothing is redirected. :func:`disable` undoes it. The design and the full list
are in ``anydevice.shims.cuda_compat``.
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING

from anydevice import settings

if TYPE_CHECKING:
    from anydevice.shims.cuda_compat import Redirect

_active: Redirect | None = None
_exit_registered = False


def enable() -> bool:
    """Redirect CUDA calls to the selected device now; False when it is cuda itself (nothing to do)."""
    global _active, _exit_registered
    if _active is not None:
        return True
    from anydevice.backend import current
    from anydevice.device_module import device_module
    from anydevice.shims.cuda_compat import install, summary

    backend = current()
    _active = install(backend, device_module())
    loud = not settings.ANYDEVICE_QUIET.flag() and (settings.RANK.get() or "0") == "0"
    if loud:
        import sys

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
    """Put back everything :func:`enable` patched."""
    global _active
    if _active is not None:
        _active.restore()
        _active = None


def enabled() -> bool:
    """Whether CUDA calls are being redirected in this process."""
    return _active is not None


def report() -> dict[str, object]:
    """This process's migration report so far: ``{"device", "calls": [{"call", "kind", "outcome"}]}``."""
    return _active.report.as_json() if _active is not None else {"device": None, "calls": []}


def _write_report() -> None:
    from anydevice.shims.cuda_compat.report import write_at_exit

    if _active is not None:
        write_at_exit(
            _active.report, settings.ANYDEVICE_CUDA_COMPAT_REPORT.get(), settings.RANK.get(), settings.ANYDEVICE_QUIET.flag()
        )


if settings.ANYDEVICE_CUDA_COMPAT.flag():
    enable()
elif not settings.ANYDEVICE_QUIET.flag():
    import sys

    sys.stderr.write(
        "anydevice: cuda-compat is off: set ANYDEVICE_CUDA_COMPAT=1 (or use `anydevice run --cuda-compat`); torch is untouched.\n"
    )
