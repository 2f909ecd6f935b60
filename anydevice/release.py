"""This release's version (``anydevice.__version__``), in a module that imports nothing, so that any layer may read it."""

from __future__ import annotations

from typing import Final

VERSION: Final = "0.4.0"
