"""Interpreter start-up hook for ``ANYDEVICE_CUDA_COMPAT=1 python script.py`` (no edit to the script).

``anydevice-cuda-compat.pth`` (installed beside the package) calls :func:`install` only when the
variable is set; unset, the line costs one environment lookup and imports nothing. :func:`install`
imports no torch: it puts the import hook of :mod:`anydevice.cuda_compat.scope` in place, which
enables cuda-compat the first time a module that is not torch's or anydevice's own imports torch
(the script, or a library it imports first), so ``mp.spawn`` children and torchrun ranks (which
inherit the variable) are covered too. It never raises into the script's ``import torch``: a bad
value, or a device that cannot be selected, is one line on stderr and torch stays as it is.

anydevice's own processes are exempt by construction: the CLI's entry point, the detection child
and the matrix workers call :func:`exempt` before they import torch (their ranks and probes enable or
skip cuda-compat explicitly). Torch imported while anydevice's own code runs (``ad.device()`` before
any ``import torch``, a plugin's detection) does not enable it either: the next import of torch by the
script does.
"""

from __future__ import annotations

import builtins

exempted = False
"""True once :func:`exempt` ran: the hook never enables cuda-compat in this process."""


def install() -> None:
    """Enable cuda-compat at the script's first ``import torch`` (the ``.pth`` line calls this when the variable is set)."""
    if exempted:
        return
    from anydevice.cuda_compat import startup_hook

    startup_hook.install()


def exempt() -> None:
    """This process is anydevice's own (CLI, detection child, matrix worker): the hook never enables cuda-compat here.

    Imports nothing: a hook the ``.pth`` line put in place, not yet enabled, is taken out again.
    """
    global exempted
    exempted = True
    hook = builtins.__import__
    if type(hook).__name__ == "ImportHook" and getattr(hook, "scope", None) is None:
        hook.remove()  # type: ignore[attr-defined]  # cuda-compat's ImportHook, known by name above: importing its class would cost the import this avoids
