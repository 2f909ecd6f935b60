"""The selected backend: resolving the selection, loading the plugin's shims once, and reporting why."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.errors import AnyDeviceError, PluginError
from anydevice.registry import Registry, get_registry
from anydevice.selection import Choice, resolve

if TYPE_CHECKING:
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
    verified_on_hardware: bool
    shims: Shims = field(repr=False, compare=False)

    @property
    def compilations(self) -> int | None:
        """Graphs compiled at ``ad.step()`` since selection on lazy devices; None on eager ones."""
        counter = getattr(self.shims.placement, "compilations", None)
        return None if counter is None else counter()  # type: ignore[no-any-return]

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
            "compile_backend": s.compilation.backend,
            "dist_backend": s.collectives.backend,
            "launcher": s.collectives.launcher,
            "compilations": self.compilations,
        }


_lock = threading.RLock()
_explicit: str | None = None
_current: Backend | None = None


def requested() -> str:
    """The selection in force: an explicit ``use()`` > ``ANYDEVICE`` > ``auto``."""
    return _explicit or settings.ANYDEVICE.get() or "auto"


def load_backend(choice: Choice, registry: Registry) -> Backend:
    """Load the chosen device's shims (imports the vendor library) and describe the result."""
    entry = registry.get(choice.name)
    spec = entry.spec
    try:
        if spec.prepare_environment is not None:
            spec.prepare_environment()
        shims = spec.load()
    except AnyDeviceError:
        raise
    except Exception as exc:
        raise PluginError(
            entry.plugin,
            exc,
            f"Loading the '{choice.name}' device failed after detection succeeded ({choice.detection.reason}). "
            "Run `anydevice doctor`, or choose another device with ANYDEVICE.",
        ) from exc
    placement = shims.placement
    return Backend(
        name=choice.name,
        plugin=entry.plugin,
        distribution=entry.distribution,
        device_type=placement.device_type,
        index=choice.index,
        count=placement.device_count(),
        chip=shims.profiling.chip() or choice.detection.chip,
        versions=dict(shims.versions),
        why=choice.why,
        request=choice.request,
        fell_back=choice.fell_back,
        verified_on_hardware=spec.verified_on_hardware,
        shims=shims,
    )


def _announce(backend: Backend) -> None:
    if settings.ANYDEVICE_QUIET.flag():
        return
    sys.stderr.write(f"anydevice: using {backend.name} ({backend.why})\n")


def select(selection: str | None = None, registry: Registry | None = None) -> Backend:
    """Resolve ``selection`` (default: what is in force) and load it, without making it current."""
    registry = registry or get_registry()
    choice = resolve(selection or requested(), registry)
    backend = load_backend(choice, registry)
    if choice.request == "auto" or "," in choice.request:
        _announce(backend)
    return backend


def use(selection: str) -> Backend:
    """Select a device explicitly for this process (wins over ``ANYDEVICE``) and load it now."""
    global _explicit, _current
    with _lock:
        backend = select(selection)
        _explicit, _current = selection, backend
        return backend


def current() -> Backend:
    """The process's backend, selected and loaded on first use."""
    global _current
    with _lock:
        if _current is None:
            _current = select()
        return _current


def reset() -> None:
    """Forget the selection (tests, notebooks); the next call selects again."""
    global _explicit, _current
    with _lock:
        _explicit, _current = None, None
