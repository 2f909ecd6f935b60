"""CUDA-written scripts, unmodified, on the selected device (opt-in).

    anydevice run --cuda-compat script.py                  # no edit at all
    ANYDEVICE_CUDA_COMPAT=1 python script.py               # script.py's first import: import anydevice.cuda_compat

With ``ANYDEVICE_CUDA_COMPAT=1`` importing this module selects the device (``ANYDEVICE``) and
redirects the common CUDA surface to it: ``.cuda()``, ``device="cuda"`` / ``torch.device("cuda")`` /
``"cuda:0"`` in factory functions and ``.to()``, ``torch.cuda.*`` (through :func:`anydevice.device_module`),
``torch.autocast("cuda")`` and ``torch.cuda.amp``, ``init_process_group("nccl")``. One line on stderr says
what was redirected; a CUDA call that cannot be mapped warns once (``CudaCompatWarning``). Without the
variable torch is left untouched (one line says so); on cuda nothing is redirected. :func:`disable`
undoes it. The list of what is and is not redirected is in ``anydevice.shims.cuda_redirect``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anydevice import settings

if TYPE_CHECKING:
    from anydevice.shims.cuda_redirect import CudaRedirect

_active: CudaRedirect | None = None


def enable() -> bool:
    """Redirect CUDA calls to the selected device now; False when it is cuda itself (nothing to do)."""
    global _active
    if _active is not None:
        return True
    from anydevice.backend import current
    from anydevice.device_module import device_module
    from anydevice.shims.cuda_redirect import install, write

    backend = current()
    _active = install(backend, device_module())
    if not settings.ANYDEVICE_QUIET.flag() and int(settings.RANK.get() or 0) == 0:
        write(
            _active.report()
            if _active
            else f"anydevice: cuda-compat: the selected device is {backend.name}; nothing to redirect."
        )
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


if settings.ANYDEVICE_CUDA_COMPAT.flag():
    enable()
elif not settings.ANYDEVICE_QUIET.flag():
    import sys

    sys.stderr.write(
        "anydevice: cuda-compat is off: set ANYDEVICE_CUDA_COMPAT=1 (or use `anydevice run --cuda-compat`); torch is untouched.\n"
    )
