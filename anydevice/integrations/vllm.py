"""vLLM follows ``ANYDEVICE``: anydevice's platform plugin for vLLM (entry point ``anydevice`` in ``vllm.platform_plugins``).

    ANYDEVICE=cpu python -m vllm.entrypoints.openai.api_server --model DIR      # or: anydevice run -- ...
    ANYDEVICE=tpu python offline.py                                              # vllm.LLM(...) follows it too

vLLM asks every platform plugin in each process it starts (API server, engine core, workers).
:func:`platform_plugin` answers:

- ``ANYDEVICE`` unset: ``None``. vLLM detects its platform exactly as without anydevice.
- ``ANYDEVICE`` set: the selection is resolved by anydevice's rules (names, aliases, lists,
  ``auto``), then the device becomes vLLM's platform as the device's anydevice plugin declares
  (``DeviceSpec.serving["vllm"]``): one of vLLM's built-in platforms (cpu; cuda, else rocm; xpu;
  tpu), asked through vLLM's own detection so that a build that cannot drive the device says so,
  or a vendor's installed platform plugin (neuron, metal, or one named like the device), which is
  called so that its registration side effects happen.
- An index (``ANYDEVICE=cuda:1``) becomes the engine's visible-device setting where the device
  declares one (``Serving.visible_devices``: ``CUDA_VISIBLE_DEVICES=1``, ``TPU_VISIBLE_CHIPS``),
  set before vLLM starts its workers; ``ANYDEVICE`` becomes ``cuda:0`` for them.
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
    from anydevice.runtime.backend import Backend

log = logging.getLogger("vllm.anydevice")  # a child of vLLM's logger: our lines appear where vLLM logs

PLUGIN = VLLM.plugin_name
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
    if decision.error is None and decision.device is not None:
        try:  # before vLLM starts its workers: they inherit it
            os.environ.update(_serving.visible_env(VLLM, selection, decision.device))
        except AnyDeviceError as exc:
            decision = _decisions[selection] = Decision(decision.device, None, exc.message, exc)
    if first:
        _serving.announce(VLLM, selection, decision, hidden, log)
    return decision.platform if decision.error is None else f"{__name__}.{SelectionRefused.__name__}"


def platform_for(selection: str) -> Decision:
    """What vLLM's platform becomes under ``selection`` (decided once per process and selection)."""
    if selection not in _decisions:
        _decisions[selection] = decide(selection)
    return _decisions[selection]


def decide(selection: str) -> Decision:
    """Resolve ``selection`` with anydevice and find vLLM's platform for the device (imports vLLM's platform module)."""
    return _serving.decide(VLLM, selection, builtin_platform)


def builtin_platform(name: str) -> _serving.Found | None:
    """vLLM's own detection of its built-in platform ``name`` (what it finds, or why not); None: no such platform."""
    from vllm.platforms import builtin_platform_plugins

    detect = builtin_platform_plugins.get(name)
    if detect is None:
        return None
    try:
        platform = detect()
    except Exception as exc:  # vLLM swallows a detection's exception (a broken driver); we report it
        return None, f"vLLM's '{name}' detection failed: {type(exc).__name__}: {exc}"
    return (
        (str(platform), f"vLLM's built-in '{name}' platform") if platform else (None, f"vLLM's '{name}' detection found nothing")
    )


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
