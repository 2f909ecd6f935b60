"""The selection grammar and its resolution against the registry.

Grammar (the one grammar of device strings: ``ANYDEVICE``, roles, ``check --target``, ``serve-spec --device`` and the
no-silent-CPU-run check all parse here)::

    request := "auto" | item ("," item)*
    item    := name [":" index]        name: a device name or alias; index: ASCII digits 0-9 only
    ref     := name [":" (index | chip [("-" | "x") count])]     (:func:`parse_ref`: check, serve-spec, launch)

Written as is: lower case, no spaces or tabs (``' CPU\t'`` is refused with "did you mean 'cpu'"). A chip is one of
the device's :attr:`~anydevice.contract.device_spec.DeviceSpec.chips` (any of its names); its count is one the chip
comes in (a host or a slice: ``tpu:v6e-7`` and ``tpu:v6e-0`` are refused with the valid list).

A single named device that is not usable is an error (never a silent fallback). ``auto`` picks
the available device with the highest priority; a list picks its first available entry. Both
report which device they chose and why.
"""

from __future__ import annotations

import difflib
import re
import weakref
from dataclasses import dataclass, field

from anydevice.contract.chips import Chip, SliceShape, example, parse_variant, shape_for
from anydevice.contract.chips import shown as short
from anydevice.contract.device_spec import NAME_PATTERN, Detection, DeviceSpec, is_valid_name
from anydevice.errors import (
    DeviceUnavailableError,
    NoDeviceAvailableError,
    SelectionError,
    SelectionTypeError,
    UnknownDeviceError,
    VersionMismatchError,
)
from anydevice.runtime.registry import Registry

AUTO = "auto"
_WELL_FORMED = re.compile(rf"(?:{NAME_PATTERN})(?::[a-z0-9][a-z0-9.x-]*)?", flags=re.ASCII)
"""One entry of a list as the grammar writes it (a name, with an index or a chip and count)."""
_INDEX = re.compile(r"0|[1-9][0-9]*", flags=re.ASCII)  # str.isdigit() also takes '²' and '١'; torch refuses 'cpu:00'


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
    if not text.strip():
        raise SelectionError(
            "The device selection is empty.", "Set ANYDEVICE to a device name, a list such as 'tpu,cuda,cpu', or 'auto'."
        )
    raw = as_written(text)
    shown = short(text)  # echoed in errors: escaped (no raw escape sequence reaches the terminal) and cut
    if raw == AUTO:
        return Request(raw)
    items: list[Item] = []
    for part in raw.split(","):
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
        name, index, variant = split_ref(part, text)
        if variant is not None:
            raise SelectionError(
                f"Bad device index '{short(variant, 40)}' in '{short(text)}': the index must be a non-negative integer "
                "written with the ASCII digits 0-9.",
                f"Write it as {name}:0, {name}:1, ... (a chip and count, {name}:CHIP-N, is for check --target and serve-spec)",
            )
        items.append(Item(name, index))
    return Request(raw, tuple(items))


def as_written(text: str) -> str:
    """``text`` when it is written as the grammar writes it (lower case, no whitespace); else a refusal naming the fix."""
    fixed = "".join(text.split()).lower()
    if fixed != text and _well_formed(fixed):
        what = "upper-case letters" if text != text.lower() else "spaces or tabs"
        if text != text.lower() and "".join(text.split()) != text:
            what = "upper-case letters and spaces or tabs"
        raise SelectionError(
            f"'{short(text)}' is not a device string as written: it has {what}. Did you mean '{short(fixed)}'?",
            "Device strings are lower case, without spaces or tabs: e.g. cpu, cuda:1, tpu,cuda,cpu.",
        )
    return text


def _well_formed(text: str) -> bool:
    """Whether ``text`` is a list of names (each with an optional ``:index`` or ``:chip``): a fix worth suggesting."""
    return text == AUTO or all(_WELL_FORMED.fullmatch(part) for part in text.split(","))


def split_ref(text: str, whole: str | None = None) -> tuple[str, int | None, str | None]:
    """``"cuda:1"`` -> ("cuda", 1, None); ``"tpu:v5e-8"`` -> ("tpu", None, "v5e-8"); ``"cpu"`` -> ("cpu", None, None).

    The syntax only (no registry): a malformed name, an empty part after ``:``, or an index written with other digits
    than ASCII 0-9 (``cuda:١``) is refused here.
    """
    name, sep, rest = text.partition(":")
    if not is_valid_name(name):
        raise SelectionError(
            f"Malformed device name '{short(name, 40)}' in '{short(whole or text)}'.",
            "Device names are lower-case letters, digits, '-' or '_', e.g. cuda or cuda:1.",
        )
    if not sep:
        return name, None, None
    if _INDEX.fullmatch(rest):
        return name, int(rest), None
    if not rest or not (rest[0].isascii() and rest[0].isalpha()):  # a chip starts with a letter; else it is an index
        raise SelectionError(
            f"Bad device index '{short(rest, 40)}' in '{short(whole or text)}': the index must be a non-negative "
            "integer written with the ASCII digits 0-9"
            + (", without leading zeros." if rest.isascii() and rest.isdigit() else "."),
            f"Write it as {name}:0, {name}:1, ...",
        )
    return name, None, rest


@dataclass(frozen=True)
class DeviceRef:
    """One device as a string names it, resolved with its declaration: ``cuda:1``, ``tpu:v5e-8``, ``cuda:h200x8``.

    ``index``: a device of the host; or ``chip`` (from the device's chips catalogue) and ``count`` as the string
    writes it (chips, or cores where the chip counts cores: ``v5p-8`` is 4 chips), with the ``shape`` it means
    (chips, hosts, topology). ``role``: the role it was given for (``ANYDEVICE_ROLES``), if any.
    """

    text: str
    name: str
    spec: DeviceSpec
    index: int | None = None
    chip: Chip | None = None
    count: int | None = None
    shape: SliceShape | None = None
    role: str | None = None

    @property
    def slice_name(self) -> str | None:
        """``"v5e-8"`` (the chip's own name and the count), or None without a chip."""
        return f"{self.chip.name}-{self.count}" if self.chip is not None and self.count is not None else None

    def __str__(self) -> str:
        if self.slice_name is not None:
            return f"{self.name}:{self.slice_name}"
        if self.chip is not None:
            return f"{self.name}:{self.chip.name}"
        return self.name if self.index is None else f"{self.name}:{self.index}"


def parse_ref(text: str, registry: Registry | None = None, *, role: str | None = None) -> DeviceRef:
    """Parse and resolve one device string (``ref`` above) against ``registry`` (default: the one in use).

    Refused here, once, each with the valid list: a name no plugin provides (did you mean), a chip the device does
    not declare (its chips listed), a count of 0, one no host or slice of the chip has (``tpu:v6e-7``, a 40-digit
    count), a count not written with ASCII digits (``tpu:v5e-²``), and text not written as the grammar writes it.
    """
    from anydevice.runtime.registry import get_registry

    if not isinstance(text, str) or not text.strip():
        registry = registry or get_registry()
        raise SelectionError(
            "No device given.", f"Name a device such as cpu, cuda:1 or {example_ref(registry)} (see `anydevice list`)."
        )
    registry = registry or get_registry()
    name, index, variant = split_ref(as_written(text))
    canonical = _canonical_or_raise(name, registry)
    spec = registry.get(canonical).spec
    if variant is None:
        return DeviceRef(text, canonical, spec, index=index, role=role)
    chip, count = parse_variant(spec.chips, variant, canonical, text)
    shape = shape_for(chip, count, canonical, text) if count is not None else None
    return DeviceRef(text, canonical, spec, chip=chip, count=count, shape=shape, role=role)


def example_ref(registry: Registry | None = None) -> str:
    """A device string with a chip and a count, for help texts and messages, read from a declared chips catalogue.

    The first device (highest priority first) that compiles slices (``CheckFacts.slice_compiler``), else the first
    that declares chips, at :func:`~anydevice.contract.chips.example`'s slice; ``DEVICE:CHIP-COUNT`` without any.
    """
    from anydevice.runtime.registry import get_registry

    registry = registry or get_registry()
    specs = [registry.spec(name) for name in registry.names()]
    ordered = [s for s in specs if s.check.slice_compiler and s.chips] + [s for s in specs if s.chips]
    for spec in ordered:
        named = example(spec.chips)
        if named is not None:
            return f"{spec.name}:{named}"
    return "DEVICE:CHIP-COUNT"


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
    error = UnknownDeviceError(short(name, 40), registry.names(), suggestion)  # a 100,000-character value is cut
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
