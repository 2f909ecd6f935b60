"""The plugin registry: a pluggy ``PluginManager`` fed from the ``anydevice`` entry-point group.

Plugins are loaded once per :class:`Registry`. A plugin that fails to import, register or
detect is recorded in :attr:`Registry.failures` with its name and error; every other plugin
keeps working. Nothing here imports torch or a vendor library.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

import pluggy

from anydevice import hookspecs, settings
from anydevice.device_spec import Detection, DeviceSpec

ENTRY_POINT_GROUP = "anydevice"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be used: its name, the stage that failed and the error text."""

    plugin: str
    stage: str  # "import", "register", "validate"
    error: str


@dataclass(frozen=True)
class RegisteredDevice:
    """A device together with the plugin that declared it."""

    spec: DeviceSpec
    plugin: str
    distribution: str | None


class Registry:
    """Discovers plugins, validates them and answers questions about their devices."""

    def __init__(self, plugins: Iterable[tuple[str, ModuleType | object, str | None]] | None = None) -> None:
        """Create a registry.

        :param plugins: explicit ``(name, module, distribution)`` triples instead of entry points
            (for tests and embedding); ``None`` loads the entry-point group, filtered by
            ``ANYDEVICE_PLUGINS``.
        """
        self._explicit = list(plugins) if plugins is not None else None
        self._lock = threading.Lock()
        self._loaded = False
        self._detections: dict[str, Detection] = {}
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.devices: dict[str, RegisteredDevice] = {}
        self.aliases: dict[str, str] = {}
        self.failures: list[PluginFailure] = []

    # -- loading --------------------------------------------------------------------------
    def load(self) -> Registry:
        """Import and register every plugin once; safe to call repeatedly."""
        with self._lock:
            if self._loaded:
                return self
            self._loaded = True
            for name, module, dist in self._candidates():
                self._register_plugin(name, module, dist)
        return self

    def _candidates(self) -> Iterable[tuple[str, ModuleType | object, str | None]]:
        if self._explicit is not None:
            yield from self._explicit
            return
        from importlib import metadata  # imported here: it costs ~25 ms and `import anydevice` stays cheap

        allowed = settings.allowed_plugins()
        seen: set[str] = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in seen or (allowed is not None and ep.name not in allowed):
                continue
            seen.add(ep.name)
            dist = ep.dist.name if ep.dist is not None else None
            try:
                module = ep.load()
            except Exception as exc:  # a broken plugin must not break the others
                self.failures.append(PluginFailure(ep.name, "import", _describe(exc)))
                continue
            yield ep.name, module, dist

    def _register_plugin(self, name: str, module: object, dist: str | None) -> None:
        try:
            self.pm.register(module, name=name)
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            self.failures.append(PluginFailure(name, "validate", _describe(exc)))
            return
        for impl in self.pm.hook.anydevice_register_devices.get_hookimpls():
            if impl.plugin is not module:
                continue
            declared: list[DeviceSpec] = []
            try:
                impl.function(register=declared.append)
            except Exception as exc:
                self.failures.append(PluginFailure(name, "register", _describe(exc)))
                continue
            for spec in declared:
                self._add_device(spec, name, dist)

    def _add_device(self, spec: DeviceSpec, plugin: str, dist: str | None) -> None:
        if not isinstance(spec, DeviceSpec):
            self.failures.append(PluginFailure(plugin, "register", f"registered {spec!r}, not a DeviceSpec"))
            return
        for key in (spec.name, *spec.aliases):
            owner = self.devices.get(key) or self.devices.get(self.aliases.get(key, ""))
            if owner is not None:
                self.failures.append(
                    PluginFailure(plugin, "register", f"device name '{key}' is already provided by plugin '{owner.plugin}'")
                )
                return
        self.devices[spec.name] = RegisteredDevice(spec, plugin, dist)
        for alias in spec.aliases:
            self.aliases[alias] = spec.name

    # -- queries --------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Device names, highest priority first."""
        self.load()
        return [d.spec.name for d in sorted(self.devices.values(), key=lambda d: (-d.spec.priority, d.spec.name))]

    def canonical(self, name: str) -> str | None:
        """The device name for a name or alias, or None when nobody provides it."""
        self.load()
        if name in self.devices:
            return name
        return self.aliases.get(name)

    def get(self, name: str) -> RegisteredDevice:
        """The registered device for a canonical name."""
        self.load()
        return self.devices[name]

    def detect(self, name: str) -> Detection:
        """Run (once) the device's cheap detection; an exception becomes an unavailable result."""
        self.load()
        if name not in self._detections:
            entry = self.devices[name]
            try:
                result = entry.spec.detect()
                if not isinstance(result, Detection):
                    raise TypeError(f"detect() returned {type(result).__name__}, not Detection")
            except Exception as exc:
                result = Detection.missing(
                    f"plugin '{entry.plugin}' raised during detection: {_describe(exc)}",
                    f"report this to the maintainers of the '{entry.plugin}' plugin, or exclude it with ANYDEVICE_PLUGINS",
                    "plugin_error",
                )
            self._detections[name] = result
        return self._detections[name]

    def available(self) -> list[str]:
        """Available device names, highest priority first."""
        return [n for n in self.names() if self.detect(n).available]

    def call_hook(self, hook: str, register: Callable[[object], None]) -> None:
        """Call a registration hook on every plugin, isolating each plugin's failures."""
        self.load()
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            try:
                impl.function(register=register)
            except Exception as exc:
                self.failures.append(PluginFailure(impl.plugin_name, f"hook {hook}", _describe(exc)))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
    return _default.load()


def reset_registry(registry: Registry | None = None) -> None:
    """Replace (or forget) the process-wide registry; for tests and long-lived tools."""
    global _default
    with _default_lock:
        _default = registry
