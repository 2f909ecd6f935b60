"""Shared pieces of the export tests: the main job's model as an inference module, and what a directory holds."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.utils import REPO

sys.path.insert(0, str(REPO / "examples"))  # llama.py, corpus.py: the main job's model and data


def entries(directory: Path) -> list[str]:
    """Every name in ``directory``, hidden temporaries included."""
    return sorted(p.name for p in directory.iterdir())
