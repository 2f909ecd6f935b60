"""Integrations with other engines (Hugging Face, torchtitan, Ray Train, serving engines); each behind an extra.

:func:`launch_environment` is what ``anydevice run`` adds to every launched process's environment: each
module in :data:`LAUNCH_ENV_PROVIDERS` has ``launch_env(backend) -> dict[str, str]`` with the variables its
engine reads (at import, before anydevice can act) to pick the selected device.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anydevice.backend import Backend

LAUNCH_ENV_PROVIDERS: tuple[str, ...] = (
    "anydevice.integrations._hf",
    "anydevice.integrations.vllm",
    "anydevice.integrations.sglang",
)
"""Integration modules whose ``launch_env(backend)`` contributes to :func:`launch_environment`."""


def launch_environment(backend: Backend) -> dict[str, str]:
    """The variables every integration needs in a launched process (merged in :data:`LAUNCH_ENV_PROVIDERS` order)."""
    env: dict[str, str] = {}
    for name in LAUNCH_ENV_PROVIDERS:
        env.update(importlib.import_module(name).launch_env(backend))
    return env
