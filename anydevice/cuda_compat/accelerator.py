"""The device-agnostic half of cuda-compat, on its own: what ``anydevice run`` gives every program (no ``--cuda-compat``).

:func:`anydevice.cuda_compat.control.enable_agnostic` installs cuda-compat's
:class:`~anydevice.cuda_compat.redirect.Redirect` with ``cuda=False``
(:func:`anydevice.cuda_compat.install.install`): one redirect, the same import hook and views, so the same
invariants hold (torch's own code holds the real ``torch``; a call that names no device of the selected type
reaches torch's original with the same arguments). In the script's view:

* ``torch.accelerator``: the selected device is the accelerator (is_available, current_accelerator,
  device_count, current/set_device_index, synchronize, the memory counters torch has, ``device_index``);
  what it cannot honour on the device (streams, graphs, ``get_memory_info`` ...) is refused at the call
  with anydevice's error, which names the call, the user's line and what to write instead (:func:`extras`);
* ``torch.get_device_module()`` is the device's module; ``torch.Generator(device="xla")`` a CPU generator
  (torch_xla has none on the device) and ``torch.inference_mode`` ``torch.no_grad`` on lazy devices;
* on lazy devices, step boundaries: after ``optimizer.step()`` and, for loops that update parameters by
  hand, at the next top-level forward after a backward (:func:`anydevice.cuda_compat.runtime.install_optimizers`).

Torch imported here: this module is imported at the script's first ``import torch`` (:mod:`anydevice.device_agnostic`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from anydevice.cuda_compat.migration_report import NEUTRAL, REFUSED
from anydevice.cuda_compat.stand_ins import stand_in
from anydevice.errors import UnsupportedDeviceFunctionError

if TYPE_CHECKING:
    from anydevice.cuda_compat.redirect import Redirect

REFUSED_NAMES: dict[str, tuple[str, str]] = {
    "current_stream": (
        "the device orders its work itself: it has no streams",
        "drop the stream code (work runs in order), or guard it: if torch.accelerator.current_accelerator().type == 'cuda'",
    ),
    "set_stream": (
        "the device orders its work itself: it has no streams",
        "drop the stream code (work runs in order), or guard it: if torch.accelerator.current_accelerator().type == 'cuda'",
    ),
    "Graph": ("graphs capture CUDA-style kernel launches", "run the captured code itself"),
    "get_memory_info": (
        "the device reports no free/total memory pair",
        "use torch.accelerator.memory_allocated(), or ad.memory_stats()",
    ),
    "get_device_capability": (
        "torch describes the capabilities of the accelerators it knows only",
        "ask about what you need directly (a dtype: try it on a small tensor)",
    ),
}
"""``torch.accelerator`` names that cannot be honoured on a device torch does not know: (reason, what to write instead)."""
NEUTRAL_NAMES: dict[str, tuple[Any, str]] = {
    "empty_host_cache": (None, "the device has no pinned host memory cache"),
}
ALIASES = {"reset_accumulated_memory_stats": "reset_peak_memory_stats"}


def extras(r: Redirect, answered: dict[str, Any]) -> dict[str, Any]:
    """The ``torch.accelerator`` names beyond cuda-compat's answers (``answered``), for a device torch does not know.

    ``device_index`` sets and restores the index through the view's answers; memory aliases map to the device
    module; every other public function of ``torch.accelerator`` is refused at the call (:data:`REFUSED_NAMES`).
    """
    from anydevice.cuda_compat.torch_cuda import _mapped

    acc = torch.accelerator
    view: dict[str, Any] = {}
    for name, target in ALIASES.items():
        if hasattr(acc, name) and hasattr(r.module, target):
            view[name] = _mapped(r, f"torch.accelerator.{name}()", target)
    for name, (value, why) in NEUTRAL_NAMES.items():
        if hasattr(acc, name):
            view[name] = _neutral(r, f"torch.accelerator.{name}()", value, why)
    if hasattr(acc, "device_index") and "set_device_index" in answered and "current_device_index" in answered:
        view["device_index"] = _device_index(answered["current_device_index"], answered["set_device_index"])
    for name in dir(acc):
        value = getattr(acc, name)
        if name.startswith("_") or name in answered or name in view or not callable(value):
            continue
        if not str(getattr(value, "__module__", "")).startswith("torch.accelerator"):
            continue  # typing helpers, functools.cache
        reason, fix = REFUSED_NAMES.get(name, ("torch has no answer for it on a device it does not know", ""))
        view[name] = _refused(r, f"torch.accelerator.{name}", reason, fix or None)
    return {name: stand_in(fn, f"torch.accelerator:{name}") for name, fn in view.items()}


def _neutral(r: Redirect, call: str, value: Any, why: str) -> Callable[..., Any]:
    def neutral(*args: Any, **kwargs: Any) -> Any:
        r.report.add(call, NEUTRAL, f"{value!r} ({why})")
        return value

    return neutral


def _refused(r: Redirect, call: str, reason: str, fix: str | None) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        r.report.add(f"{call}()", REFUSED, reason)
        raise UnsupportedDeviceFunctionError(f"{call}()", r.name, reason, fix)

    return refused


def _device_index(current: Callable[[], int], set_index: Callable[[Any], None]) -> Callable[..., Any]:
    """``with torch.accelerator.device_index(i):`` through the view's own index answers (None: nothing changes)."""

    @contextlib.contextmanager
    def device_index(device: int | None, /) -> Iterator[None]:
        if device is None:
            yield
            return
        before = current()
        set_index(device)
        try:
            yield
        finally:
            set_index(before)

    return functools.wraps(torch.accelerator.device_index)(device_index)
