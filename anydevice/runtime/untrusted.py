"""Text a plugin gives (names, reasons, fixes, chip names, check text), made safe to print or render.

:func:`clean` is the one function every output path uses (``list``, ``info``, ``doctor``, the
matrix page): control characters and escape sequences are escaped (``\\x1b`` is printed as the
four characters ``\\x1b``, a newline as ``\\n``, a non-UTF-8 byte's surrogate as ``\\udce9``),
so a plugin cannot retitle the terminal, move the cursor, forge rows or crash the output; and the
length is capped, so a 5 MB reason cannot make a 5 MB listing.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Final, TypeVar, cast, overload

if TYPE_CHECKING:
    from anydevice.contract.device_spec import Detection

LIMIT: Final = 500
"""Characters of one plugin text kept; the rest is replaced by ``… (N more)``."""

MAX_COUNT: Final = 65536
"""The most devices of one kind a plugin may report (``Detection.count``): more is a broken detection, not a machine."""

MAX_DETAILS: Final = 32
"""Entries of a detection's ``details`` kept; the rest are replaced by one entry saying how many were cut."""

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Control characters, line and direction marks, and lone surrogates (a non-UTF-8 path, ``os.fsdecode``), which no
UTF-8 terminal can print."""
_MARKER = re.compile(r"… \(\d+ more\)$")
T = TypeVar("T")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


@overload
def clean(text: str, limit: int = LIMIT) -> str: ...
@overload
def clean(text: None, limit: int = LIMIT) -> None: ...
def clean(text: str | None, limit: int = LIMIT) -> str | None:
    """``text`` with control characters escaped and at most ``limit`` characters (None stays None).

    Idempotent: cleaning a cleaned text changes nothing.
    """
    if text is None:
        return None
    text = str(text)
    if len(text) <= limit and not _UNSAFE.search(text):
        return text  # the common case: nothing to escape or cut
    marker = _MARKER.search(text)
    if marker is not None and marker.start() <= limit and not _UNSAFE.search(text):
        return text  # cleaned and capped already
    pieces, used = [], 0
    for char in text[:limit]:
        piece = _UNSAFE.sub(_escape, char)
        if used + len(piece) > limit:
            break
        pieces.append(piece)
        used += len(piece)
    shown, more = "".join(pieces), len(text) - len(pieces)
    return f"{shown}… ({more} more)" if more else shown


def clean_tree(value: T, limit: int = LIMIT) -> T:
    """:func:`clean` applied to every string inside nested dicts, lists and tuples (keys included)."""
    if isinstance(value, str):
        return cast(T, clean(value, limit))  # a str in, a str out
    if isinstance(value, dict):
        return cast(T, {clean_tree(k, limit): clean_tree(v, limit) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return cast(T, type(value)(clean_tree(v, limit) for v in value))
    return value


def count_problem(count: object) -> str | None:
    """Why a third party's ``Detection.count`` is out of range (above :data:`MAX_COUNT`), as a detection problem; None
    when it is not (types and negative counts are the declaration's own checks)."""
    if not isinstance(count, int) or isinstance(count, bool) or count <= MAX_COUNT:
        return None
    shown = repr(count) if count.bit_length() <= 128 else f"a {count.bit_length()}-bit number"
    return f"field 'count' = {shown}: must be 0 to {MAX_COUNT} (the devices of this kind the host has)"


def clean_detection(detection: Detection) -> Detection:
    """A third party's :class:`~anydevice.contract.device_spec.Detection` with every text cleaned and at most
    :data:`MAX_DETAILS` details (one more entry, ``…``, says how many were cut)."""
    items = list(detection.details.items())
    details = {clean(k): clean(v) for k, v in items[:MAX_DETAILS]}
    if len(items) > MAX_DETAILS:
        details["…"] = f"{len(items) - MAX_DETAILS} more details cut"
    return dataclasses.replace(
        detection, reason=clean(detection.reason), fix=clean(detection.fix), chip=clean(detection.chip), details=details
    )
