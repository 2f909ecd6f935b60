"""A checkpoint as a GPU machine writes it: every storage tagged ``cuda:0``, made without a GPU.

``torch.save`` asks ``torch.serialization.location_tag`` where each storage lives; answering
``"cuda:0"`` while saving writes the same bytes a CUDA run would (only the tag differs from a CPU save).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.serialization as serialization

SHAPES = {
    "emb.weight": (32, 32),
    "pos.weight": (16, 32),
    "mlp.0.weight": (64, 32),
    "mlp.0.bias": (64,),
    "mlp.2.weight": (32, 64),
    "mlp.2.bias": (32,),
    "head.weight": (32, 32),
    "head.bias": (32,),
}
"""The state dict of the scripts' TinyLM (tests/cuda_compat/scripts/gpt_*.py)."""


def gpt_state(seed: int = 3) -> dict[str, torch.Tensor]:
    """A random TinyLM state dict."""
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=g) * 0.1 for name, shape in SHAPES.items()}


def save_as_gpu(obj: Any, path: Path) -> Path:
    """``torch.save(obj, path)`` with every storage tagged ``cuda:0``."""
    original = serialization.location_tag
    serialization.location_tag = lambda storage: "cuda:0"  # type: ignore[assignment]
    try:
        torch.save(obj, path)
    finally:
        serialization.location_tag = original
    assert b"cuda:0" in path.read_bytes() or _zipped_tag(path)
    return path


def _zipped_tag(path: Path) -> bool:
    import zipfile

    with zipfile.ZipFile(path) as archive:
        return any(b"cuda:0" in archive.read(name) for name in archive.namelist() if name.endswith("data.pkl"))
