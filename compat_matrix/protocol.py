"""The line protocol between the runner and a probe worker subprocess.

The worker writes one message per line to its stdout: a marker, then a JSON object with a
``type``. Any other line (native code printing to the same pipe) belongs to the probe that is
running and goes into its log.
"""

from __future__ import annotations

import json
from typing import Any, Final

MARKER: Final = "\x1e@anydevice-probe "


def encode(kind: str, **fields: Any) -> str:
    """One protocol line (with its newline)."""
    return MARKER + json.dumps({"type": kind, **fields}, default=str) + "\n"


def decode(line: str) -> dict[str, Any] | None:
    """The message in ``line``, or None when it is not a protocol line."""
    at = line.find(MARKER)
    if at < 0:
        return None
    try:
        message = json.loads(line[at + len(MARKER) :])
    except json.JSONDecodeError:
        return None
    return message if isinstance(message, dict) and "type" in message else None
