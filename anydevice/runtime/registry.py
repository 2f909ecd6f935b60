"""The plugin registry: a pluggy ``PluginManager`` fed from the ``anydevice`` entry-point group.

Plugins are loaded once per :class:`Registry`, built-in plugins first. Every call into plugin
code goes through :meth:`Registry.call` (:func:`anydevice.runtime.guard.call`): anything it raises
(``SystemExit`` included) is caught and reported by plugin and stage, and its ``print()`` goes
to stderr. Built-in plugins are trusted: their calls run in this thread, without a deadline,
so a registry of built-ins alone starts no thread. A third-party plugin is untrusted: its
import, registration hook and detection are first tried in one child process
(:mod:`anydevice.runtime.isolation`, cached), so a hang in C code or a native crash costs one deadline
and a report, not the process; the plugins that passed are then imported here under the
deadline (``ANYDEVICE_DETECT_TIMEOUT``) in a daemon thread, their detections come from the child,
and their declarations are validated (types, name grammar, ranges) before they are used. A
plugin that fails is recorded in :attr:`Registry.failures`; every other plugin keeps working.
Built-in devices win name and alias clashes whatever the order of the entry points on the path,
and each clash is recorded too. Nothing here imports torch or a vendor library.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from anydevice import settings
from anydevice.contract import hookspecs
from anydevice.contract.device_spec import Detection, DeviceSpec, detection_problems, spec_problems
from anydevice.errors import SelectionError
from anydevice.runtime import guard, leftovers
from anydevice.runtime.untrusted import clean, clean_detection, count_problem

T = TypeVar("T")

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from anydevice.runtime import isolation

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
    value: str | None = None  # the entry point's ``module:attr``; None for an explicit plugin object
    version: str | None = None

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
        self._loading_threads: set[int] = set()  # the loading thread and the threads running plugin code for it
        self._loaded = False
        self._detections: dict[str, Detection] = {}
        self.timeout = timeout
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.devices: dict[str, RegisteredDevice] = {}
        self.aliases: dict[str, str] = {}
        self.failures: list[PluginFailure] = []
        self._trusted: set[str] = set()  # plugin names shipped with anydevice

    # -- loading --------------------------------------------------------------------------
    def load(self) -> Registry:
        """Import and register every plugin once; safe to call repeatedly.

        Raises :class:`~anydevice.errors.SelectionError` (and loads nothing) when
        ``ANYDEVICE_PLUGINS`` names a plugin that is not installed, or a setting is malformed.
        """
        if threading.get_ident() in self._loading_threads:
            raise RegistryReentryError(
                "called back into the registry while it was loading plugins (from a plugin's import or registration "
                "hook), which can never finish; read the registry from detect() or load() instead"
            )
        with self._lock:
            if self._loaded:
                return self
            self._loading_threads.add(threading.get_ident())
            try:
                self._load_plugins()
            finally:
                self._loading_threads.discard(threading.get_ident())
        return self

    def _load_plugins(self) -> None:
        """:meth:`load`'s work, under its lock."""
        settings.validate()
        if self.timeout is None:
            self.timeout = settings.detect_timeout()
        candidates = list(self._candidates())
        self._loaded = True
        for candidate in candidates:
            if candidate.builtin:
                self._trusted.add(candidate.name)
                self._register_plugin(candidate)
        others = [c for c in candidates if not c.builtin]
        vetted = self._vet(others)
        failed = {name for name, outcome in vetted.items() if outcome.failure is not None}
        imports = self._start_imports([c for c in others if c.name not in failed])
        for candidate in others:
            outcome = vetted.get(candidate.name)
            if outcome is not None and outcome.failure is not None:
                self._fail(candidate.name, *outcome.failure)
                continue
            self._register_plugin(candidate, imports[candidate.name])
            if outcome is not None:
                for name, entry in self.devices.items():
                    if entry.plugin == candidate.name and name in outcome.detections:
                        self._detections[name] = self._checked(entry, outcome.detections[name])

    def _vet(self, candidates: list[_Candidate]) -> dict[str, isolation.Outcome]:
        """Third-party entry points tried in a child process first (:mod:`anydevice.runtime.isolation`)."""
        if not any(c.value is not None for c in candidates):
            return {}
        from anydevice.runtime import isolation  # imported here: only a third-party plugin needs it

        plugins = [isolation.Plugin(c.name, c.value, c.distribution, c.version) for c in candidates if c.value is not None]
        steering = {v for entry in self.devices.values() for v in entry.spec.environment}
        return isolation.vet(plugins, self.deadline, steering)

    def trusted(self, plugin: str) -> bool:
        """True for a plugin shipped with anydevice (its calls run without a deadline or a thread)."""
        return plugin in self._trusted

    def call(self, plugin: str, stage: str, fn: Callable[[], T]) -> T:
        """Call plugin code guarded (:func:`anydevice.runtime.guard.call`); third-party code under the deadline.

        Raises :class:`~anydevice.runtime.guard.PluginCallError` naming the plugin and the stage.
        """
        return guard.call(fn, None if self.trusted(plugin) else self.deadline, plugin, stage)

    def _call_while_loading(self, plugin: str, stage: str, fn: Callable[[], T]) -> T:
        """:meth:`call` for plugin code run during :meth:`load`: a call back into the registry from it is an error."""
        return self.call(plugin, stage, self._marked(fn))

    def _marked(self, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn``, run with its thread marked as loading plugins (see :class:`RegistryReentryError`)."""

        def marked() -> T:
            me = threading.get_ident()
            self._loading_threads.add(me)
            try:
                return fn()
            finally:
                self._loading_threads.discard(me)

        return marked

    def _start_imports(self, candidates: list[_Candidate]) -> dict[str, Callable[[], object]]:
        """Start every third-party import at once (each in its thread, each under its own deadline).

        Returns, per plugin, a call that waits for its import: the module, or :class:`~anydevice.runtime.guard.PluginCallError`.
        """
        deadline = self.deadline
        started: dict[str, Callable[[], object]] = {}
        for candidate in candidates:
            if candidate.value is not None:
                leftovers.note_package(candidate.value.partition(":")[0], candidate.name)
            pending = guard.Guarded(self._marked(candidate.load), f"import-{candidate.name}", candidate.name)
            started[candidate.name] = functools.partial(_imported, candidate.name, pending, time.monotonic() + deadline, deadline)
        return started

    def _fail(self, plugin: str, stage: str, error: str) -> None:
        self.failures.append(PluginFailure(clean(plugin, 100), stage, clean(error)))

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
        given = clean(settings.ANYDEVICE_PLUGINS.get(), 200)
        twice = _named_twice(settings.ANYDEVICE_PLUGINS.get())
        if twice:
            raise SelectionError(
                f"{settings.ANYDEVICE_PLUGINS.name}={given!r} names {', '.join(twice)} more than once.",
                f"Name each plugin once, separated by commas (e.g. {settings.ANYDEVICE_PLUGINS.name}=cpu,xla).",
            )
        value = settings.ANYDEVICE_PLUGINS.get() or ""
        if value.strip() and any(not part.strip() for part in value.split(",")):  # as ANYDEVICE refuses 'tpu,,cpu'
            raise SelectionError(
                f"{settings.ANYDEVICE_PLUGINS.name}={given!r} has an empty entry.",
                f"Separate plugin names with single commas (e.g. {settings.ANYDEVICE_PLUGINS.name}=cpu,xla).",
            )
        if allowed is not None and (not allowed or allowed - found.keys()):
            unknown = clean(", ".join(sorted(allowed - found.keys())) or "none", 200)
            raise SelectionError(
                f"{settings.ANYDEVICE_PLUGINS.name}={given!r} names plugins that are not installed: {unknown}.",
                f"Installed plugins: {', '.join(sorted(found)) or 'none'}. Fix the names, or unset "
                f"{settings.ANYDEVICE_PLUGINS.name} to load every installed plugin.",
            )
        for name, eps in found.items():
            if allowed is not None and name not in allowed:
                continue
            winner = next((ep for ep in eps if _distribution(ep) == BUILTIN_DISTRIBUTION), eps[0])
            for other in eps:
                if other is not winner:
                    self._fail(name, "clash", _entry_point_clash(other, winner))
            dist = getattr(winner, "dist", None)
            yield _Candidate(
                name,
                functools.partial(load_entry_point, winner),
                _distribution(winner),
                winner.value,
                dist.version if dist is not None else None,
            )

    def _register_plugin(self, candidate: _Candidate, imported: Callable[[], object] | None = None) -> None:
        name = candidate.name
        try:
            module = imported() if imported is not None else self._call_while_loading(name, "import", candidate.load)
        except guard.PluginCallError as exc:  # a broken plugin must not break the others, even by exiting
            self._fail(name, "import", exc.error)
            return
        try:
            self.pm.register(module, name=name)
            self.pm.check_pending()
            if not candidate.builtin and not self.pm.get_hookcallers(module):
                raise TypeError(_no_hooks(candidate, module))
        except Exception as exc:
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            self._fail(name, "validate", guard.describe(exc))
            return
        for impl in self.pm.hook.anydevice_register_devices.get_hookimpls():
            if impl.plugin is not module:
                continue
            declared: list[object] = []
            try:
                wants = {"registry": self.view()} if "registry" in impl.argnames else {}  # hookspecs: optional argument
                self._call_while_loading(name, "register", functools.partial(impl.function, register=declared.append, **wants))
            except guard.PluginCallError as exc:
                self._fail(name, "register", exc.error)
                continue
            for spec in list(declared):
                self._add_device(spec, candidate)

    def _add_device(self, spec: object, candidate: _Candidate) -> None:
        plugin = candidate.name
        if not isinstance(spec, DeviceSpec):
            self._fail(plugin, "register", f"registered {spec!r}, not a DeviceSpec")
            return
        if not candidate.builtin:
            problems = spec_problems(spec)
            if problems:
                label = repr(spec.name) if isinstance(spec.name, str) else "a device"
                self._fail(plugin, "validate", f"device {label} is declared with invalid values: {'; '.join(problems)}")
                return
        owner = self._owner(spec.name)
        if owner is not None:
            self._fail(plugin, "clash", f"device name '{spec.name}' is already provided by {_by(owner)}; this device is ignored")
            return
        aliases: list[str] = []
        for alias in spec.aliases:
            owner = self._owner(alias)
            if owner is not None or alias == spec.name or alias in aliases:
                by = _by(owner) if owner is not None else f"device '{spec.name}' itself"
                self._fail(
                    plugin,
                    "clash",
                    f"alias '{alias}' of device '{spec.name}' is already provided by {by}; the alias is ignored, "
                    f"select the device as '{spec.name}'",
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
        return [d.spec.name for d in sorted(self.devices.values(), key=_auto_order)]

    def canonical(self, name: str) -> str | None:
        """The device name for a name or alias, or None when nobody provides it."""
        self.load()
        if name in self.devices:
            return name
        return self.aliases.get(name)

    def spec(self, name: str) -> DeviceSpec:
        """The declaration of device ``name`` (a canonical name)."""
        return self.get(name).spec

    def view(self) -> DevicesView:
        """The read-only view of these devices that hooks receive."""
        return DevicesView(self)

    def get(self, name: str) -> RegisteredDevice:
        """The registered device for a canonical name."""
        self.load()
        return self.devices[name]

    def detect(self, name: str) -> Detection:
        """Run (once) the device's cheap detection, under the deadline; a failure becomes an unavailable result."""
        return self.detect_all([name])[name]

    def detect_all(self, names: Iterable[str] | None = None) -> dict[str, Detection]:
        """Detect several devices (default: all), each once.

        Built-in detection runs here, one device after the other (it is cheap, and starts no
        thread); third-party detection was done by the child process at load, or, for plugins
        given as objects, runs concurrently in daemon threads, all within one deadline.
        """
        self.load()
        wanted = list(self.names() if names is None else names)
        timeout = self.deadline
        missing = [name for name in wanted if name not in self._detections]
        started = {
            name: guard.Guarded(self.devices[name].spec.detect, f"detect-{name}", self.devices[name].plugin)
            for name in missing
            if not self.devices[name].builtin
        }
        deadline = time.monotonic() + timeout
        for name in missing:
            entry = self.devices[name]
            if name in started:
                self._detections[name] = self._finish_detection(entry, started[name], deadline, timeout)
            else:
                self._detections[name] = self._detect_trusted(entry)
        return {name: self._detections[name] for name in wanted}

    def _detect_trusted(self, entry: RegisteredDevice) -> Detection:
        try:
            result = guard.call(entry.spec.detect, None, entry.plugin, "detect")
        except guard.PluginCallError as exc:
            return _failed_detection(entry.plugin, exc.cause, self.deadline)
        return self._checked(entry, result)

    def _finish_detection(
        self, entry: RegisteredDevice, pending: guard.Guarded[Detection], deadline: float, timeout: float
    ) -> Detection:
        try:
            with guard.stdout_to_stderr():
                result = pending.result(guard.remaining(deadline))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            return _failed_detection(entry.plugin, exc, timeout)
        return self._checked(entry, result)

    def _checked(self, entry: RegisteredDevice, result: object) -> Detection:
        """``result`` if it is a valid :class:`Detection` (a third party's with its texts cleaned), else a failure."""
        if not isinstance(result, Detection):
            error = f"TypeError: detect() returned {type(result).__name__}, not Detection"
            return guard.plugin_detection_failure(entry.plugin, "raised", error)
        if entry.builtin:
            return result
        problems = detection_problems(result)
        problems += [problem] if not problems and (problem := count_problem(result.count)) else []
        if problems:
            return guard.plugin_detection_failure(entry.plugin, "invalid", "; ".join(problems))
        return clean_detection(result)

    def available(self) -> list[str]:
        """Available device names, highest priority first."""
        detections = self.detect_all()
        return [n for n in self.names() if detections[n].available]

    def call_hook(self, hook: str, register: Callable[[object], None]) -> None:
        """Call a registration hook on every plugin, isolating each plugin's failures (guarded, see :meth:`call`)."""
        self.load()
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            try:
                self.call(impl.plugin_name, f"hook {hook}", functools.partial(impl.function, register=register))
            except guard.PluginCallError as exc:
                self._fail(impl.plugin_name, f"hook {hook}", exc.error)


def _imported(plugin: str, pending: guard.Guarded[object], deadline: float, seconds: float) -> object:
    """The module of an import started by :meth:`Registry._start_imports`; its failure as a ``PluginCallError``."""
    try:
        return pending.result(guard.remaining(deadline))
    except KeyboardInterrupt:
        raise
    except guard.DeadlineExceeded:
        raise guard.PluginCallError(plugin, "import", guard.DeadlineExceeded(seconds)) from None
    except BaseException as exc:  # a plugin must not end the process, even by exiting
        raise guard.PluginCallError(plugin, "import", exc) from exc


def _failed_detection(plugin: str, exc: BaseException, timeout: float) -> Detection:
    if isinstance(exc, guard.DeadlineExceeded):
        return guard.plugin_detection_failure(plugin, "timeout", str(exc), timeout)
    kind = "exit" if isinstance(exc, SystemExit) else "raised"
    return guard.plugin_detection_failure(plugin, kind, guard.describe(exc))


class RegistryReentryError(RuntimeError):
    """Plugin code run while the registry loads called back into the registry (it would wait for itself forever)."""


def load_entry_point(ep: EntryPoint) -> Any:
    """``ep.load()``; a malformed value is a ``ValueError`` naming the entry point and what is wrong with it."""
    if ep.pattern.match(ep.value) is None:  # EntryPoint.load would fail with "'NoneType' object has no attribute 'group'"
        raise ValueError(
            f"malformed entry point {ep.name} = {ep.value!r} in group '{ep.group}': the value must be 'module' or "
            "'module:attribute' (dotted Python names)"
        )
    return ep.load()


def _named_twice(value: str | None) -> list[str]:
    """The plugin names a comma-separated ``ANYDEVICE_PLUGINS`` value lists more than once (spaces around names ignored)."""
    names = [part.strip() for part in (value or "").split(",") if part.strip()]
    return sorted({name for name in names if names.count(name) > 1})


def _no_hooks(candidate: _Candidate, plugin: object) -> str:
    """Why a plugin that implements no hook is refused, naming its entry point and what that names."""
    what = f"module {plugin.__name__}" if isinstance(plugin, ModuleType) else f"an object of type {type(plugin).__name__}"
    where = f"entry point {candidate.name} = {candidate.value!r}" if candidate.value is not None else f"plugin {candidate.name}"
    return (
        f"{where} names {what}, which implements no anydevice hook; a plugin is a module (or object) with "
        "@hookimpl functions such as anydevice_register_devices"
    )


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


def builtin_registry() -> Registry:
    """A loaded registry of the plugins anydevice ships, whatever ``ANYDEVICE_PLUGINS`` says (the one way to build it).

    A built-in plugin that fails to import is recorded as a failure, as in any registry.
    """
    from importlib import metadata

    builtins = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if _distribution(ep) == BUILTIN_DISTRIBUTION]
    return Registry(plugins=[(ep.name, ep.load(), BUILTIN_DISTRIBUTION) for ep in sorted(builtins, key=lambda e: e.name)]).load()


def builtin_plugin_settings() -> tuple[settings.Setting, ...]:
    """The settings the built-in plugins' devices declare (``DeviceSpec.settings``), for the README table."""
    registry = builtin_registry()
    return tuple(s for n in registry.names() for s in registry.get(n).spec.settings)


def _auto_order(device: RegisteredDevice) -> tuple[int, bool, str]:
    """Highest priority first; at equal priority built-in devices first. The name only orders a listing:
    ``auto`` refuses a tie between third-party devices (``selection``) rather than pick one by name."""
    return (-device.spec.priority, not device.builtin, device.spec.name)


class DevicesView:
    """:class:`~anydevice.contract.device_spec.Devices` over a :class:`Registry`: names and declarations, nothing to change."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def names(self) -> list[str]:
        """Device names, highest priority first."""
        return self._registry.names()

    def canonical(self, name: str) -> str | None:
        """The device name for a name or alias, or None."""
        return self._registry.canonical(name)

    def spec(self, name: str) -> DeviceSpec:
        """The declaration of device ``name``."""
        return self._registry.get(name).spec


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
