"""SGLang follows ``ANYDEVICE``: anydevice's platform plugin for SGLang (entry point ``anydevice`` in ``sglang.srt.platforms``).

    anydevice run -- python -m sglang.launch_server --model-path DIR      # sets SGLANG_PLATFORM=anydevice
    SGLANG_PLATFORM=anydevice ANYDEVICE=cpu SGLANG_USE_CPU_ENGINE=1 python -m sglang.launch_server ...

SGLang resolves its platform in each process. With ``SGLANG_PLATFORM=anydevice`` it loads only
this plugin; without it, it asks every installed plugin and refuses when two answer, so while
``ANYDEVICE`` names the device the plugin makes the others inactive for that resolution
(:func:`anydevice.integrations._serving.hide_other_platform_plugins`). :func:`platform_plugin` answers:

- ``ANYDEVICE`` unset: ``None`` (SGLang's own detection decides).
- ``ANYDEVICE`` set: anydevice resolves it and the device becomes SGLang's platform class
  (:data:`BUILTIN`: cpu, cuda or ROCm, xpu, mps, npu), or a vendor's ``sglang.srt.platforms``
  plugin named like the device (called, so its side effects happen).
- Not servable: :class:`SelectionRefused`, an ``SRTPlatform`` whose construction raises
  anydevice's error (SGLang logs and ignores a plugin's exception when it auto-discovers).

SGLang's CPU engine also needs ``SGLANG_USE_CPU_ENGINE=1`` before SGLang is imported
(``sglang.srt.utils.is_cpu`` is read once, at import). ``anydevice run`` sets it; in a process
started another way the plugin sets it while SGLang has not read it yet, and otherwise refuses
with the fix.

Importing this module imports neither torch nor SGLang.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.errors import AnyDeviceError
from anydevice.integrations import _serving
from anydevice.integrations._serving import SGLANG, Decision

if TYPE_CHECKING:
    from anydevice.backend import Backend

log = logging.getLogger("sglang.anydevice")

PLUGIN = SGLANG.plugin_name
_PLATFORMS = "sglang.srt.platforms"
BUILTIN: dict[str, str] = {
    "cpu": f"{_PLATFORMS}.cpu.CpuSRTPlatform",
    "cuda": f"{_PLATFORMS}.cuda.CudaSRTPlatform",
    "xpu": f"{_PLATFORMS}.xpu.XpuSRTPlatform",
    "mps": f"{_PLATFORMS}.mps.MpsSRTPlatform",
    "npu": f"{_PLATFORMS}.npu.NPUSRTPlatform",
}
"""anydevice device -> SGLang's built-in platform class (cuda on a ROCm torch: :data:`ROCM`)."""
ROCM = f"{_PLATFORMS}.rocm.RocmSRTPlatform"
NOT_COVERED: dict[str, str] = {
    "tpu": "SGLang's TPU support is a separate JAX project (sglang-jax) with its own server; it has no "
    "sglang.srt.platforms entry, so ANYDEVICE cannot move SGLang there",
    "xla": "SGLang has no PJRT/torch_xla platform",
}
"""Devices SGLang cannot serve on through its platform plugins, and why (unless a vendor plugin for them is installed)."""

_decisions: dict[str, Decision] = {}


def platform_plugin() -> str | None:
    """SGLang's entry point: the platform class for ``ANYDEVICE``, or None when it is unset (SGLang decides alone)."""
    selection = _serving.requested()
    if selection is None:
        return None
    hidden = _serving.hide_other_platform_plugins("sglang.srt.platforms", "_resolve_platform", "all_plugins", "activated", PLUGIN)
    first = selection not in _decisions
    decision = platform_for(selection)
    if first:
        _serving.announce(SGLANG, selection, decision, hidden, log)
    return decision.platform if decision.error is None else f"{__name__}.SelectionRefused"


def platform_for(selection: str) -> Decision:
    """What SGLang's platform becomes under ``selection`` (decided once per process and selection)."""
    if selection not in _decisions:
        _decisions[selection] = decide(selection)
    return _decisions[selection]


def decide(selection: str) -> Decision:
    """Resolve ``selection`` with anydevice and map the device to an SGLang platform class."""
    try:
        device, why = _serving.resolve_device(selection)
    except AnyDeviceError as exc:
        return Decision(None, None, str(exc), exc)
    vendor = _serving.vendor_entry_point(SGLANG, device, {})
    if vendor is not None:
        return _serving.call_vendor_plugin(SGLANG, device, vendor)
    if device in BUILTIN:
        if device == "cpu":
            refused = _cpu_engine()
            if refused is not None:
                return Decision(device, None, refused.message, refused)
        return Decision(device, ROCM if device == "cuda" and _torch_is_rocm() else BUILTIN[device], why)
    reason = NOT_COVERED.get(device, f"SGLang has no built-in platform for {device} and no SGLang platform plugin for it is installed")
    fix = f"serve {device} with another engine, or install the vendor's sglang.srt.platforms plugin; choose another device with ANYDEVICE"
    return Decision(device, None, reason, _serving.unusable(device, reason, fix))


def _torch_is_rocm() -> bool:
    import torch

    return getattr(torch.version, "hip", None) is not None


def _cpu_engine() -> AnyDeviceError | None:
    """Turn on SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``) if SGLang has not read it yet; else anydevice's error."""
    name = settings.SGLANG_USE_CPU_ENGINE.name
    value = os.environ.get(name)
    if value == "1":
        return None
    fix = f"start with `anydevice run -- ...` (it sets {name}=1), or export {name}=1 before starting SGLang"
    if value is not None:
        return AnyDeviceError(f"ANYDEVICE selects cpu but {name}={value}: SGLang's CPU engine stays off.", fix)
    common = sys.modules.get("sglang.srt.utils.common")  # may be half imported: SGLang resolves its platform from it
    is_cpu = getattr(common, "is_cpu", None)
    if is_cpu is not None and is_cpu.cache_info().currsize:  # read already, as off: setting it now changes nothing
        return AnyDeviceError(f"ANYDEVICE selects cpu but SGLang was imported without {name}=1.", fix)
    os.environ[name] = "1"
    log.info("anydevice: ANYDEVICE selects cpu: set %s=1 for SGLang's CPU engine", name)
    return None


def _refused_class() -> type:
    """An ``SRTPlatform`` whose construction raises anydevice's error (SGLang accepts only its subclasses)."""
    from sglang.srt.platforms.interface import SRTPlatform

    class SelectionRefused(SRTPlatform):  # type: ignore[misc]
        """The platform SGLang gets when the selection cannot be served: constructing it raises anydevice's error."""

        def __init__(self) -> None:
            selection = _serving.requested() or "auto"
            error = platform_for(selection).error
            raise error or AnyDeviceError(f"ANYDEVICE={selection} cannot be served by SGLang here.", "Run `anydevice doctor`.")

    SelectionRefused.__module__ = __name__
    return SelectionRefused


def __getattr__(name: str) -> Any:
    """``SelectionRefused`` is built on first use, so that importing this module does not import SGLang."""
    if name == "SelectionRefused":
        cls = _refused_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def launch_env(backend: Backend) -> dict[str, str]:
    """For ``anydevice run``: ``SGLANG_PLATFORM=anydevice`` (and the CPU engine switch on cpu) when SGLang is installed.

    A value the user set is kept.
    """
    if _serving.installed_distribution(SGLANG) is None:
        return {}
    env = {settings.SGLANG_PLATFORM.name: PLUGIN}
    if backend.name == "cpu":
        env[settings.SGLANG_USE_CPU_ENGINE.name] = "1"
    return {k: v for k, v in env.items() if k not in os.environ}
