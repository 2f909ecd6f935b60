"""Integrations with other engines (Hugging Face, torchtitan, Ray Train, serving engines); each behind an extra.

:func:`launch_environment` is what ``anydevice run`` adds to every launched process's environment: each
module in :data:`LAUNCH_ENV_PROVIDERS` has ``launch_env(backend) -> dict[str, str]`` with the variables its
engine reads (at import, before anydevice can act) to pick the selected device.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend

LAUNCH_ENV_PROVIDERS: tuple[str, ...] = (
    "anydevice.integrations._hf",
    "anydevice.integrations.vllm",
    "anydevice.integrations.sglang",
)
"""Integration modules whose ``launch_env(backend)`` contributes to :func:`launch_environment`."""
BY_NAME: frozenset[str] = frozenset({"anydevice.integrations.vllm", "anydevice.integrations.sglang"})
"""Providers that read only the selected device's name (:func:`selection_environment` runs them without the shims)."""


@dataclass(frozen=True)
class _Named:
    """The selection before its backend is loaded: only its name."""

    name: str


def launch_environment(backend: Backend) -> dict[str, str]:
    """The variables every integration needs in a launched process (merged in :data:`LAUNCH_ENV_PROVIDERS` order)."""
    env: dict[str, str] = {}
    for name in LAUNCH_ENV_PROVIDERS:
        env.update(importlib.import_module(name).launch_env(backend))
    return env


def selection_environment(device: str) -> dict[str, str]:
    """What the providers in :data:`BY_NAME` add for ``device``, without loading its shims (one-process ``anydevice run``).

    The rest (Hugging Face's) is set in the rank when Transformers, Accelerate or Diffusers is first imported.
    """
    env: dict[str, str] = {}
    for name in LAUNCH_ENV_PROVIDERS:
        if name in BY_NAME:
            env.update(importlib.import_module(name).launch_env(_Named(device)))
    return env
