"""What a corpus program prints: one ``DIGEST {...}`` line of SHA-256 digests of everything it computed.

Programs import this first; a program whose third-party package is missing calls :func:`skip`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import torch

_digests: dict[str, str] = {}


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous().reshape(-1)
        h.update(f"{t.dtype}{tuple(value.shape)}{value.device.type}".encode())
        if t.numel():
            h.update(t.view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(str(key).encode())
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _feed(h, item)
    else:
        h.update(repr(value).encode())


def record(name: str, value: Any) -> None:
    """Digest ``value`` (tensors by dtype, shape, device type and bytes) under ``name``."""
    h = hashlib.sha256()
    _feed(h, value)
    _digests[name] = h.hexdigest()[:20]


def done() -> None:
    """Print the digest line (the program's last line)."""
    print("DIGEST " + json.dumps(_digests, sort_keys=True), flush=True)


def skip(reason: str) -> None:
    print(f"SKIP {reason}", flush=True)
    sys.exit(0)


def need(*modules: str) -> None:
    """Skip the program where a third-party package it uses is not installed."""
    import importlib.util

    for name in modules:
        if importlib.util.find_spec(name) is None:
            skip(f"{name} is not installed in this lane")
