"""The plugin registry: a pluggy ``PluginManager`` fed from the ``anydevice`` entry-point group.

Plugins are loaded once per :class:`Registry`, built-in plugins first. A third-party plugin is
untrusted: its import, registration hook and detection run under a deadline
(``ANYDEVICE_DETECT_TIMEOUT``) in a daemon thread, anything it raises (``SystemExit`` included)
is caught, and its declarations are validated (types, name grammar, ranges) before they are
used. A plugin that fails is recorded in :attr:`Registry.failures` with its name, the stage
and the error; every other plugin keeps working. Built-in devices win name and alias clashes
whatever the order of the entry points on the path, and each clash is recorded too. Nothing
here imports torch or a vendor library.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import pluggy

from anydevice import guard, hookspecs, settings
from anydevice.device_spec import Detection, DeviceSpec, detection_problems, spec_problems
from anydevice.errors import SelectionError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "anydevice"
BUILTIN_DISTRIBUTION = "anydevice"
"""The distribution whose plugins are built in: trusted, registered first, winning every clash."""


@dataclass(frozen=True)
class PluginFailure:
    """A plugin (or part of one) that could not be used: its name, the stage that failed and the error.

    Stages: ``import``, ``validate`` (the hook implementations or a declaration are invalid),
    ``register`` (the registration hook raised, exited or hung), ``clash`` (an entry-point name,
    device name or alias is already taken; the earlier one, always a built-in where one is
    involved, wins) and ``hook <name>`` (a matrix hook raised).
    """

    plugin: str
    stage: str
    error: str


@dataclass(frozen=True)
class RegisteredDevice:
    """A device together with the plugin that declared it."""

    spec: DeviceSpec
    plugin: str
    distribution: str | None

    @property
    def builtin(self) -> bool:
        """True for the devices shipped with anydevice."""
        return self.distribution == BUILTIN_DISTRIBUTION


@dataclass(frozen=True)
class _Candidate:
    name: str
    load: Callable[[], object]
    distribution: str | None

    @property
    def builtin(self) -> bool:
        return self.distribution == BUILTIN_DISTRIBUTION


class Registry:
    """Discovers plugins, validates them and answers questions about their devices."""

    def __init__(
        self,
        plugins: Iterable[tuple[str, ModuleType | object, str | None]] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Create a registry.

        :param plugins: explicit ``(name, module, distribution)`` triples instead of entry points
            (for tests and embedding); ``None`` loads the entry-point group, filtered by
            ``ANYDEVICE_PLUGINS``. A distribution of ``"anydevice"`` marks a built-in plugin.
        :param timeout: seconds a plugin may take to import, register or detect; ``None`` reads
            ``ANYDEVICE_DETECT_TIMEOUT`` when the plugins are loaded.
        """
        self._explicit = list(plugins) if plugins is not None else None
        self._lock = threading.Lock()
        self._loaded = False
        self._detections: dict[str, Detection] = {}
        self.timeout = timeout
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.devices: dict[str, RegisteredDevice] = {}
        self.aliases: dict[str, str] = {}
        self.failures: list[PluginFailure] = []

    # -- loading --------------------------------------------------------------------------
    def load(self) -> Registry:
        """Import and register every plugin once; safe to call repeatedly.

        Raises :class:`~anydevice.errors.SelectionError` (and loads nothing) when
        ``ANYDEVICE_PLUGINS`` names a plugin that is not installed, or a setting is malformed.
        """
        with self._lock:
            if self._loaded:
                return self
            if self.timeout is None:
                self.timeout = settings.detect_timeout()
            candidates = list(self._candidates())
            self._loaded = True
            for candidate in sorted(candidates, key=lambda c: not c.builtin):  # stable: built-ins first
                self._register_plugin(candidate)
        return self

    @property
    def deadline(self) -> float:
        """Seconds a plugin may take for one stage (import, registration, detection)."""
        return self.timeout if self.timeout is not None else settings.detect_timeout()

    def _candidates(self) -> Iterator[_Candidate]:
        if self._explicit is not None:
            for name, module, dist in self._explicit:
                yield _Candidate(name, functools.partial(_identity, module), dist)
            return
        from importlib import metadata  # imported here: it costs ~25 ms and `import anydevice` stays cheap

        found: dict[str, list[EntryPoint]] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name, []).append(ep)
        allowed = settings.allowed_plugins()
        if allowed is not None and (not allowed or allowed - found.keys()):
            unknown = ", ".join(sorted(allowed - found.keys())) or "none"
            raise SelectionError(
                f"{settings.ANYDEVICE_PLUGINS.name}={settings.ANYDEVICE_PLUGINS.get()!r} names plugins that are not "
                f"installed: {unknown}.",
                f"Installed plugins: {', '.join(sorted(found)) or 'none'}. Fix the names, or unset "
                f"{settings.ANYDEVICE_PLUGINS.name} to load every installed plugin.",
            )
        for name, eps in found.items():
            if allowed is not None and name not in allowed:
                continue
            winner = next((ep for ep in eps if _distribution(ep) == BUILTIN_DISTRIBUTION), eps[0])
            for other in eps:
                if other is not winner:
                    self.failures.append(PluginFailure(name, "clash", _entry_point_clash(other, winner)))
            yield _Candidate(name, winner.load, _distribution(winner))

    def _register_plugin(self, candidate: _Candidate) -> None:
        name = candidate.name
        try:
            module = guard.call(candidate.load, self.deadline, f"import-{name}")
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a broken plugin must not break the others, even by exiting
            self.failures.append(PluginFailure(name, "import", guard.describe(exc)))
            return
        try:
            self.pm.register(module, name=name)
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            self.failures.append(PluginFailure(name, "validate", guard.describe(exc)))
            return
        for impl in self.pm.hook.anydevice_register_devices.get_hookimpls():
            if impl.plugin is not module:
                continue
            declared: list[object] = []
            try:
                wants = {"registry": self} if "registry" in impl.argnames else {}  # hookspecs: optional argument
                guard.call(functools.partial(impl.function, register=declared.append, **wants), self.deadline, f"register-{name}")
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self.failures.append(PluginFailure(name, "register", guard.describe(exc)))
                continue
            for spec in list(declared):
                self._add_device(spec, candidate)

    def _add_device(self, spec: object, candidate: _Candidate) -> None:
        plugin = candidate.name
        if not isinstance(spec, DeviceSpec):
            self.failures.append(PluginFailure(plugin, "register", f"registered {spec!r}, not a DeviceSpec"))
            return
        if not candidate.builtin:
            problems = spec_problems(spec)
            if problems:
                label = repr(spec.name) if isinstance(spec.name, str) else "a device"
                self.failures.append(
                    PluginFailure(plugin, "validate", f"device {label} is declared with invalid values: {'; '.join(problems)}")
                )
                return
        owner = self._owner(spec.name)
        if owner is not None:
            self.failures.append(
                PluginFailure(
                    plugin, "clash", f"device name '{spec.name}' is already provided by {_by(owner)}; this device is ignored"
                )
            )
            return
        aliases: list[str] = []
        for alias in spec.aliases:
            owner = self._owner(alias)
            if owner is not None or alias == spec.name or alias in aliases:
                by = _by(owner) if owner is not None else f"device '{spec.name}' itself"
                self.failures.append(
                    PluginFailure(
                        plugin,
                        "clash",
                        f"alias '{alias}' of device '{spec.name}' is already provided by {by}; the alias is ignored, "
                        f"select the device as '{spec.name}'",
                    )
                )
                continue
            aliases.append(alias)
        if tuple(aliases) != spec.aliases:
            spec = dataclasses.replace(spec, aliases=tuple(aliases))
        self.devices[spec.name] = RegisteredDevice(spec, plugin, candidate.distribution)
        for alias in aliases:
            self.aliases[alias] = spec.name

    def _owner(self, key: str) -> RegisteredDevice | None:
        return self.devices.get(key) or self.devices.get(self.aliases.get(key, ""))

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
        """Run (once) the device's cheap detection, under the deadline; a failure becomes an unavailable result."""
        return self.detect_all([name])[name]

    def detect_all(self, names: Iterable[str] | None = None) -> dict[str, Detection]:
        """Detect several devices (default: all) concurrently, all within one deadline."""
        self.load()
        wanted = list(self.names() if names is None else names)
        timeout = self.deadline
        started = {
            name: guard.Guarded(self.devices[name].spec.detect, f"detect-{name}")
            for name in wanted
            if name not in self._detections
        }
        deadline = time.monotonic() + timeout
        for name, pending in started.items():
            self._detections[name] = self._finish_detection(name, pending, deadline, timeout)
        return {name: self._detections[name] for name in wanted}

    def _finish_detection(self, name: str, pending: guard.Guarded[Detection], deadline: float, timeout: float) -> Detection:
        entry = self.devices[name]
        fix = f"report this to the maintainers of the '{entry.plugin}' plugin, or exclude it with ANYDEVICE_PLUGINS"
        try:
            result = pending.result(guard.remaining(deadline))
            if not isinstance(result, Detection):
                raise TypeError(f"detect() returned {type(result).__name__}, not Detection")
        except KeyboardInterrupt:
            raise
        except guard.DeadlineExceeded:
            return Detection.missing(
                f"plugin '{entry.plugin}' did not finish detection within {timeout:g} s",
                f"{fix}; if it is only slow, raise {settings.ANYDEVICE_DETECT_TIMEOUT.name}",
                "plugin_error",
            )
        except SystemExit as exc:
            return Detection.missing(f"plugin '{entry.plugin}' {guard.describe(exc)} during detection", fix, "plugin_error")
        except BaseException as exc:
            return Detection.missing(
                f"plugin '{entry.plugin}' raised during detection: {guard.describe(exc)}", fix, "plugin_error"
            )
        if not entry.builtin:
            problems = detection_problems(result)
            if problems:
                return Detection.missing(
                    f"plugin '{entry.plugin}' returned an invalid detection: {'; '.join(problems)}", fix, "plugin_error"
                )
        return result

    def available(self) -> list[str]:
        """Available device names, highest priority first."""
        detections = self.detect_all()
        return [n for n in self.names() if detections[n].available]

    def call_hook(self, hook: str, register: Callable[[object], None]) -> None:
        """Call a registration hook on every plugin, isolating each plugin's failures."""
        self.load()
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            try:
                impl.function(register=register)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self.failures.append(PluginFailure(impl.plugin_name, f"hook {hook}", guard.describe(exc)))


def _identity(value: object) -> object:
    return value


def _distribution(ep: EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else None


def _entry_point_clash(loser: EntryPoint, winner: EntryPoint) -> str:
    where = f"'{loser.value}' from {_distribution(loser) or 'an unknown distribution'}"
    kept = f"'{winner.value}' from {_distribution(winner) or 'an unknown distribution'}"
    built_in = " (built into anydevice)" if _distribution(winner) == BUILTIN_DISTRIBUTION else ""
    return (
        f"entry point '{loser.name}' = {where} is ignored: the name is already taken by {kept}{built_in}; "
        "rename the plugin's entry point"
    )


def _by(owner: RegisteredDevice) -> str:
    return f"plugin '{owner.plugin}'" + (" (built into anydevice)" if owner.builtin else "")


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
