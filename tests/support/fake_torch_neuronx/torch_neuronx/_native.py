"""FAKE / SIMULATED neuron device memory: builds and loads ``_device.cpp`` (tests only).

The C++ extension makes the PrivateUse1 device hold tensors in host memory the way PyTorch's
reference out-of-tree backend (OpenReg) does; nothing here touches Neuron hardware. It is
compiled once per torch version into ``~/.cache/anydevice/fake-neuron-ext/<torch version>``
(``FAKE_NEURON_EXT_DIR`` overrides the parent folder); later imports load the cached library.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("_device.cpp")
NAME = "fake_neuron_device"


def build_dir() -> Path:
    """Where the compiled extension for this torch version lives."""
    root = os.environ.get("FAKE_NEURON_EXT_DIR") or Path.home() / ".cache" / "anydevice" / "fake-neuron-ext"
    return Path(root) / torch.__version__


def load() -> str:
    """Build (first time only) and load the extension; returns the shared library's path."""
    from torch.utils import cpp_extension

    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    _drop_stale_lock(directory / "lock")
    return str(
        cpp_extension.load(
            name=NAME, sources=[str(SOURCE)], build_directory=str(directory), is_python_module=False, verbose=False
        )
    )


def _drop_stale_lock(lock: Path, max_age_s: float = 600.0) -> None:
    """Remove a build lock left by a build that was killed: torch's builder would wait on it forever."""
    import time

    try:
        if time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink()
    except FileNotFoundError:
        pass
