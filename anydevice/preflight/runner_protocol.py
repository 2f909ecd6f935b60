"""Files ``anydevice check`` and its child (:mod:`anydevice.preflight.runner`) exchange beside the observation."""

from __future__ import annotations

COMPILE_REQUEST = "compile-request.json"
"""Written by the parent for slice targets: ``{"targets": ["tpu:v5e-8"], "mesh": {...} | null}``."""
COMPILING = "compiling"
"""Written by the child while it compiles: the target under way (a compile killed for memory or time is named by it)."""
