"""The selected backend: resolving the selection, loading the plugin's shims once, and reporting why."""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.contract.evidence import Evidence
from anydevice.errors import AnyDeviceError, PluginError, SelectionError
from anydevice.runtime import guard
from anydevice.runtime.registry import RegisteredDevice, Registry, get_registry
from anydevice.runtime.selection import AUTO, Choice, parse, resolve
from anydevice.runtime.untrusted import clean

if TYPE_CHECKING:
    from anydevice.contract.device_spec import DeviceSpec
    from anydevice.shims.contracts import Shims


@dataclass(frozen=True)
class Backend:
    """What was selected: the device, the plugin that provides it, the chip, versions and why."""

    name: str
    plugin: str
    distribution: str | None
    device_type: str
    index: int | None
    count: int
    chip: str | None
    versions: dict[str, str]
    why: str
    request: str
    fell_back: bool
    evidence: Evidence
    """What stands behind the device's plugin (``DeviceSpec.evidence``)."""
    shims: Shims = field(repr=False, compare=False)
    launcher: str = "torchrun"
    """The launcher ``anydevice run`` uses for this device (``DeviceSpec.launch``)."""

    @property
    def verified_on_hardware(self) -> bool:
        """True only when the plugin's evidence is a run on the chip."""
        return self.evidence.verified_on_hardware

    @property
    def compilations(self) -> int | None:
        """Graphs compiled at ``ad.step()`` since selection on lazy devices; None on eager ones."""
        from anydevice.shims.contracts import Diagnostics

        diagnostics = self.shims.capability(Diagnostics)
        return diagnostics.compilations() if diagnostics is not None else None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly description (everything but the shims)."""
        s = self.shims
        return {
            "name": self.name,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "device_type": self.device_type,
            "index": self.index,
            "device": str(s.placement.device(self.index)),
            "count": self.count,
            "chip": self.chip,
            "versions": dict(self.versions),
            "why": self.why,
            "request": self.request,
            "fell_back": self.fell_back,
            "verified_on_hardware": self.verified_on_hardware,
            "evidence": self.evidence.as_dict(),
            "compile_backend": s.compilation.backend,
            "dist_backend": s.collectives.backend,
            "launcher": self.launcher,
            "compilations": self.compilations,
        }


_lock = threading.RLock()
_explicit: str | None = None
_current: Backend | None = None
_used_by: str | None = None  # the first call that placed or compiled something on the current device


def requested() -> str:
    """The selection in force: an explicit ``use()`` > ``ANYDEVICE`` > ``auto``."""
    return _explicit or settings.ANYDEVICE.get() or "auto"


def load_backend(choice: Choice, registry: Registry) -> Backend:
    """Load the chosen device's shims (imports the vendor library) and describe the result.

    Every call into the plugin (``prepare_environment``, ``load``, the shim methods read here) is
    guarded (:meth:`Registry.call`): a plugin that raises, exits, hangs past the deadline (third
    party) or returns something other than :class:`~anydevice.shims.contracts.Shims` is a
    :class:`~anydevice.errors.PluginError` naming the plugin and the stage.
    """
    entry = registry.get(choice.name)
    spec = entry.spec
    hint = (
        f"Loading the '{choice.name}' device failed after detection succeeded ({choice.detection.reason}). "
        "Run `anydevice doctor`, or choose another device with ANYDEVICE."
    )
    try:
        if spec.prepare_environment is not None:
            registry.call(entry.plugin, "prepare_environment", spec.prepare_environment)
        if not registry.trusted(entry.plugin):
            _import_torch()  # the deadline is for the plugin's own work, not for importing torch
        shims = registry.call(entry.plugin, "load", spec.load)
        _check_shims(entry.plugin, shims)
        _check_agreement(entry.plugin, spec, shims)
        return registry.call(entry.plugin, "describe", functools.partial(_describe, choice, entry, shims))
    except guard.PluginCallError as exc:
        if isinstance(exc.cause, AnyDeviceError):
            raise exc.cause from None  # the plugin's own clear error (no chip, version mismatch)
        if isinstance(exc.cause, guard.DeadlineExceeded):
            hint = (
                f"{hint} If the plugin is only slow (a large vendor library on a busy machine), raise "
                f"{settings.ANYDEVICE_DETECT_TIMEOUT.name} (now {exc.cause.seconds:g} s)."
            )
        raise PluginError(entry.plugin, f"{exc.error} (at {exc.stage})", hint) from exc.cause


def _import_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        pass  # the plugin's load says what is missing


def _check_shims(plugin: str, shims: object) -> None:
    from anydevice.shims.contracts import Shims

    if not isinstance(shims, Shims):
        raise PluginError(
            plugin,
            f"load() returned {type(shims).__name__}, not Shims",
            f"report this to the maintainers of the '{plugin}' plugin: DeviceSpec.load must return "
            "anydevice.shims.contracts.Shims; or choose another device with ANYDEVICE.",
        )


def disagreements(spec: DeviceSpec, shims: Shims) -> list[str]:
    """Where a device's declaration read without torch (``DeviceSpec.check``, ``DeviceSpec.launch``) contradicts
    its loaded shims; empty when they agree.

    ``anydevice check``, ``ad.capabilities()`` and ``anydevice run`` read the declaration without loading the
    shims, so a fact both state must be the same fact: the process-group backend, the reduce ops the group
    lacks, the compile backend, and a per-core launch only for the host itself.
    """
    facts, found = spec.check, []
    backend = shims.collectives.backend
    if facts.dist_backend is not None and facts.dist_backend != backend:
        found.append(f"CheckFacts.dist_backend is {facts.dist_backend!r} but the collectives shim's backend is {backend!r}")
    lacking = frozenset(shims.collectives.lacking_reduce_ops)
    if facts.lacking_reduce_ops is not None and frozenset(facts.lacking_reduce_ops) != lacking:
        declared = sorted(facts.lacking_reduce_ops)
        found.append(f"CheckFacts.lacking_reduce_ops is {declared} but the collectives shim lacks {sorted(lacking)}")
    compiler = shims.compilation.backend
    if facts.compile_backends and compiler not in facts.compile_backends:
        backends = list(facts.compile_backends)
        found.append(f"CheckFacts.compile_backends is {backends} but the compilation shim's backend is {compiler!r}")
    if spec.launch.ranks == "per_core" and not shims.placement.host:
        found.append("Launch(ranks='per_core') is for the host CPU, but the placement shim is not the host (host=False)")
    return found


def _check_agreement(plugin: str, spec: DeviceSpec, shims: Shims) -> None:
    found = disagreements(spec, shims)
    if found:
        raise PluginError(
            plugin,
            f"the '{spec.name}' device declares a fact twice and the two disagree: {'; '.join(found)}",
            f"report this to the maintainers of the '{plugin}' plugin: declare each fact once and derive the other "
            "(docs/plugins.md, 'Each fact once'); or choose another device with ANYDEVICE.",
        )


def _describe(choice: Choice, entry: RegisteredDevice, shims: Shims) -> Backend:
    placement = shims.placement
    chip = shims.profiling.chip() or choice.detection.chip
    return Backend(
        name=choice.name,
        plugin=entry.plugin,
        distribution=entry.distribution,
        device_type=placement.device_type,
        index=choice.index,
        count=placement.device_count(),
        chip=clean(chip),
        versions={clean(str(k)): clean(str(v)) for k, v in dict(shims.versions).items()},
        why=choice.why,
        request=choice.request,
        fell_back=choice.fell_back,
        evidence=entry.spec.evidence,
        shims=shims,
        launcher=clean(entry.spec.launch.launcher_name()),
    )


def _announce(backend: Backend, choice: Choice) -> None:
    """One short stderr line for ``auto`` and lists; the full "why" is in ``anydevice info``."""
    if settings.ANYDEVICE_QUIET.flag():
        return
    if choice.request == AUTO:
        skipped = f"; {len(choice.rejected)} higher-priority device(s) unavailable" if choice.rejected else ""
        line = f"auto: the available device with the highest priority{skipped}; `anydevice info` says why"
    else:  # a list: which named earlier choices were unusable, and why, is what the user needs to see
        line = backend.why
    sys.stderr.write(f"anydevice: using {backend.name} ({line})\n")


def select(selection: str | None = None, registry: Registry | None = None, *, announce: bool = True) -> Backend:
    """Resolve ``selection`` (default: what is in force) and load it, without making it current.

    ``announce`` writes the one stderr line saying what ``auto`` or a list chose.
    """
    registry = registry or get_registry()
    choice = resolve(selection or requested(), registry)
    backend = load_backend(choice, registry)
    if announce and (choice.request == AUTO or "," in choice.request):
        _announce(backend, choice)
    return backend


def use(selection: str, *, strict: bool | None = None) -> Backend:
    """Select a device explicitly for this process (wins over ``ANYDEVICE``) and load it now.

    ``""`` (or only spaces) means ``auto``. Once something was placed or compiled on the current
    device (``ad.to``, ``ad.compile``, ``ad.device``), switching to another device raises
    :class:`~anydevice.errors.SelectionError`: the tensors and compiled graphs already made stay on
    the first device, so a switch would mix devices. Call ``anydevice.reset()`` first to switch on
    purpose. Selecting the current device again is allowed.

    ``strict=True`` turns strict mode on (as ``ANYDEVICE_STRICT=1``): an op that runs on the CPU instead
    of the device raises :class:`~anydevice.errors.CpuFallbackError` at the ``ad.step()`` of that step;
    ``strict=False`` turns it off whatever the variable says; None (the default) leaves it to the variable.
    """
    from anydevice.runtime import strict as strict_mode

    if strict is not None:
        strict_mode.set_explicit(bool(strict))
    backend = _use(selection)
    strict_mode.activate(backend)
    return backend


def _use(selection: str) -> Backend:
    global _explicit, _current
    blank = isinstance(selection, str) and not selection.strip()
    request = AUTO if blank else parse(selection).text  # parse() rejects non-strings with a SelectionTypeError
    with _lock:
        registry = get_registry()
        if _current is not None and _used_by is not None:
            choice = resolve(request, registry)
            if _same_device(_current, choice):
                _explicit = request
                return _current
            raise SelectionError(
                f"use({selection!r}) would switch from {_current.name} to {choice.name} after {_used_by} was used on "
                f"{_current.name}.",
                "Tensors and compiled models stay on the first device, so anydevice does not switch under them: call "
                "anydevice.reset() first to switch on purpose, or select the device once, before placing anything.",
            )
        backend = select(request, registry)
        _explicit, _current = request, backend
        return backend


def _same_device(backend: Backend, choice: Choice) -> bool:
    if choice.name != backend.name:
        return False
    placement = backend.shims.placement
    return choice.index == backend.index or str(placement.device(choice.index)) == str(placement.device(backend.index))


def mark_used(by: str) -> None:
    """Record that ``by`` (``ad.to``, ``ad.compile``, ...) placed or compiled something on the current device."""
    global _used_by
    with _lock:
        if _used_by is None:
            _used_by = by


def current(*, announce: bool = True) -> Backend:
    """The process's backend, selected and loaded on first use (``announce``: see :func:`select`)."""
    global _current
    with _lock:
        if _current is None:
            _current = select(announce=announce)
        return _current


def backend_beside(choice: Choice, request: str, registry: Registry) -> Backend:
    """The process's own backend when ``choice`` is its device, else one loaded for ``choice`` beside it (a role's:
    a trainer on xla and a rollout on cpu in one process), once, by :func:`load_backend` (the registry's guard),
    kept with the process's own: :func:`reset` forgets both."""
    own = current()
    if choice.name == own.name and choice.index == own.index:
        return own
    key = (id(registry), request)
    with _lock:
        if key not in _roles:
            _roles[key] = load_backend(choice, registry)
        return _roles[key]


_roles: dict[tuple[int, str], Backend] = {}
"""Backends loaded for roles on another device than the process's, by registry and request."""


def reset() -> None:
    """Forget the selection, the roles' backends and what was placed (tests, notebooks); the next call selects again."""
    global _explicit, _current, _used_by
    from anydevice.runtime import strict

    with _lock:
        _explicit, _current, _used_by = None, None, None
        _roles.clear()
    strict.reset()
