"""The selection grammar and its resolution against the registry.

Grammar::

    request := "auto" | item ("," item)*
    item    := name [":" index]        name: a device name or alias; index: ASCII digits 0-9 only

A single named device that is not usable is an error (never a silent fallback). ``auto`` picks
the available device with the highest priority; a list picks its first available entry. Both
report which device they chose and why.
"""

from __future__ import annotations

import difflib
import re
import weakref
from dataclasses import dataclass, field

from anydevice.contract.device_spec import Detection, is_valid_name
from anydevice.errors import (
    DeviceUnavailableError,
    NoDeviceAvailableError,
    SelectionError,
    SelectionTypeError,
    UnknownDeviceError,
    VersionMismatchError,
)
from anydevice.runtime.registry import Registry
from anydevice.runtime.untrusted import clean

AUTO = "auto"
_INDEX = re.compile(r"[0-9]+", flags=re.ASCII)  # str.isdigit() also takes '²' and '١' (Arabic-Indic one)


@dataclass(frozen=True)
class Item:
    """One entry of a request: a name and an optional index."""

    name: str
    index: int | None = None

    def __str__(self) -> str:
        return self.name if self.index is None else f"{self.name}:{self.index}"


@dataclass(frozen=True)
class Request:
    """A parsed selection: ``auto`` or an ordered list of items."""

    text: str
    items: tuple[Item, ...] = ()

    @property
    def is_auto(self) -> bool:
        return not self.items


@dataclass(frozen=True)
class Choice:
    """The outcome of resolution: which device, which index, and why."""

    name: str
    index: int | None
    detection: Detection
    request: str
    why: str
    fell_back: bool = False
    rejected: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def parse(text: str) -> Request:
    """Parse a selection string; raise :class:`SelectionError` with the fix when malformed."""
    if not isinstance(text, str):
        raise SelectionTypeError(
            f"A device selection must be a string such as 'cpu', 'cuda:1' or 'auto', not {type(text).__name__} ({text!r}).",
            "Pass the device name as a string, e.g. ad.use('cpu').",
        )
    raw = text.strip().lower()
    shown = clean(text)  # echoed in errors: a raw escape sequence from the environment must not reach the terminal
    if not raw:
        raise SelectionError(
            "The device selection is empty.", "Set ANYDEVICE to a device name, a list such as 'tpu,cuda,cpu', or 'auto'."
        )
    if raw == AUTO:
        return Request(raw)
    items: list[Item] = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            raise SelectionError(
                f"Malformed device list '{shown}': it has an empty entry.",
                "Separate device names with single commas, e.g. ANYDEVICE=tpu,cuda,cpu.",
            )
        if part == AUTO:
            raise SelectionError(
                f"Malformed device list '{shown}': 'auto' cannot be combined with other entries.",
                "Use ANYDEVICE=auto alone, or list the devices in order of preference.",
            )
        name, sep, index_text = part.partition(":")
        name = name.strip()
        if not is_valid_name(name):
            raise SelectionError(
                f"Malformed device name '{clean(name)}' in '{shown}'.",
                "Device names are lower-case letters, digits, '-' or '_', e.g. cuda or cuda:1.",
            )
        index: int | None = None
        if sep:
            index_text = index_text.strip()
            if not _INDEX.fullmatch(index_text):
                raise SelectionError(
                    f"Bad device index {index_text!r} in '{clean(part)}': the index must be a non-negative integer "
                    "written with the ASCII digits 0-9.",
                    f"Write it as {name}:0, {name}:1, ...",
                )
            index = int(index_text)
        items.append(Item(name, index))
    return Request(raw, tuple(items))


def resolve(text: str, registry: Registry) -> Choice:
    """Resolve a selection string to one usable device, or raise a typed error saying why not.

    Resolved once per registry and request: asking again (the launcher plans, then loads) is a lookup.
    """
    request = parse(text)
    known = _resolved.setdefault(registry, {})
    if request.text not in known:
        known[request.text] = _resolve(request, registry)
    return known[request.text]


_resolved: weakref.WeakKeyDictionary[Registry, dict[str, Choice]] = weakref.WeakKeyDictionary()


def _resolve(request: Request, registry: Registry) -> Choice:
    if request.is_auto:
        return _resolve_auto(request, registry)
    for item in request.items:  # a typo anywhere in a list is an error, never skipped
        _canonical_or_raise(item.name, registry)
    rejected: list[tuple[str, str]] = []
    for position, item in enumerate(request.items):
        name = _canonical_or_raise(item.name, registry)
        detection = registry.detect(name)
        if detection.available:
            _check_index(name, item.index, detection, registry)
            if len(request.items) == 1:
                why = f"selected by name ({request.text}): {detection.reason}"
            else:
                skipped = "; ".join(f"{n}: {w}" for n, w in rejected) or "it is the first entry"
                why = f"first available in '{request.text}' ({skipped})"
            return Choice(name, item.index, detection, request.text, why, fell_back=position > 0, rejected=tuple(rejected))
        rejected.append((str(item), detection.reason))
        if len(request.items) == 1:
            if detection.problem == "version_mismatch":
                raise VersionMismatchError(name, detection.reason, detection.fix, registry.available())
            raise DeviceUnavailableError(name, detection.reason, detection.fix, registry.available(), detection.problem)
    raise NoDeviceAvailableError(request.text, rejected, registry.available())


def _resolve_auto(request: Request, registry: Registry) -> Choice:
    rejected: list[tuple[str, str]] = []
    for name in registry.names():
        detection = registry.detect(name)
        if detection.available:
            _refuse_a_tie(name, registry)
            skipped = "; ".join(f"{n}: {w}" for n, w in rejected)
            why = f"auto: {name} is the available device with the highest priority" + (f" ({skipped})" if skipped else "")
            # not a fallback: auto names no device, so passing over unavailable ones is its normal work
            return Choice(name, None, detection, request.text, why, fell_back=False, rejected=tuple(rejected))
        rejected.append((name, detection.reason))
    raise NoDeviceAvailableError(request.text, rejected, [])


def _refuse_a_tie(name: str, registry: Registry) -> None:
    """``auto`` never picks between two available third-party devices of equal priority by their names.

    A built-in device wins a tie with a third-party one (it is listed first); two third-party devices at
    the top with the same priority are refused, naming both and the fix.
    """
    first = registry.get(name)
    if first.builtin:
        return
    tied = [
        other
        for other in registry.names()
        if other != name
        and not registry.get(other).builtin
        and registry.get(other).spec.priority == first.spec.priority
        and registry.detect(other).available
    ]
    if tied:
        names = ", ".join([name, *tied])
        raise SelectionError(
            f"auto cannot choose between {names}: each is available with priority {first.spec.priority}, and anydevice "
            "does not break a tie by name.",
            f"Select one with ANYDEVICE={name} (or ANYDEVICE={name},{tied[0]} for an order), "
            "or give the plugins different priorities.",
        )


def _canonical_or_raise(name: str, registry: Registry) -> str:
    canonical = registry.canonical(name)
    if canonical is not None:
        return canonical
    known = [*registry.devices, *registry.aliases]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    suggestion = registry.canonical(close[0]) if close else None
    failed = [f.plugin for f in registry.failures]
    error = UnknownDeviceError(name, registry.names(), suggestion)
    if failed:
        error.hint = f"{error.hint} Plugins that failed to load: {', '.join(failed)} (see `anydevice list`)."
    raise error


def _check_index(name: str, index: int | None, detection: Detection, registry: Registry) -> None:
    if index is None or detection.count is None:
        return
    if index >= detection.count:
        raise DeviceUnavailableError(
            f"{name}:{index}",
            f"index {index} is out of range: {detection.count} {name} device(s) found",
            f"use an index from 0 to {detection.count - 1}, e.g. ANYDEVICE={name}:0",
            registry.available(),
            "no_hardware",
        )
