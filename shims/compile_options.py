"""Which ``torch.compile`` keywords a device understands; the rest are refused before anything compiles.

``ad.compile(model, **options)`` passes ``options`` to ``torch.compile`` with the device's backend.
A keyword ``torch.compile`` does not have, or one the device's backend cannot take (inductor's
``mode``/``options`` on torch_xla's ``openxla``), raises :class:`UnsupportedFeatureError` naming
the option and the device, instead of a ``TypeError`` now or a backend crash at the first call.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from anydevice.errors import UnsupportedFeatureError

TORCH_COMPILE: Final = frozenset({"backend", "fullgraph", "dynamic", "mode", "options", "disable"})
"""``torch.compile``'s keywords besides the model (torch 2.9 to 2.15)."""
INDUCTOR: Final = TORCH_COMPILE
"""inductor (and backends that take inductor's ``mode``/``options``) understands all of them."""


def check(device: str, options: Mapping[str, Any], understood: Collection[str], why: str = "") -> None:
    """Raise naming the first option of ``options`` that ``device`` does not understand."""
    for name in options:
        if name in understood and name in TORCH_COMPILE:
            continue
        known = ", ".join(sorted(n for n in understood if n in TORCH_COMPILE))
        if name not in TORCH_COMPILE:
            problem = f"ad.compile on {device} got option '{name}', which torch.compile does not have"
        else:
            problem = f"ad.compile option '{name}' is not understood on {device}" + (f": {why}" if why else "")
        raise UnsupportedFeatureError(f"{problem}.", f"Options {device} understands: {known}.")
