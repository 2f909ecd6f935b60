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

import os
import sys

from anydevice import settings
from anydevice.cuda_compat import startup_hook
from anydevice.cuda_compat.control import disable, enable, enabled, report

__all__ = ["disable", "enable", "enabled", "report"]

if os.environ.get(startup_hook.VARIABLE, "").strip():
    startup_hook.install()  # now if torch is imported, else at the script's first `import torch`; a bad value raises there
elif not settings.ANYDEVICE_QUIET.flag() and not getattr(sys.modules.get("anydevice.device_agnostic"), "importing", False):
    sys.stderr.write(
        "anydevice: cuda-compat is off: set ANYDEVICE_CUDA_COMPAT=1 (or use `anydevice run --cuda-compat`); torch is untouched.\n"
    )
