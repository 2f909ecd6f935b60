"""Per-op evidence from the project's compatibility-matrix results: ops a real run on a device ran on the CPU.

Each result file (``compat_matrix/results/*.json``, shipped as ``anydevice.compat_matrix``'s data) names its
device (``plugin.name``) and, per probe, the ``fallback_ops`` the runtime counted. For ``anydevice check``
an op a real run of the target counted is a CPU fallback there, with that run as its source. A simulated
run (``hardware.simulated``, the fake TorchNeuron) is no evidence, and a host read (``.item()``, counted
by torch_xla) is reported by check as a host read, not as an op. The files are read as data (JSON), so
this feature does not import the matrix package above it; the matrix's own tests validate their schema.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from anydevice.preflight.schema import HOST_READ


def results_dir() -> Path | None:
    """Where the project's committed matrix result files are (None when the matrix package is not installed)."""
    spec = importlib.util.find_spec("anydevice.compat_matrix")  # locates the package's folder; imports nothing of it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "results"


@functools.cache
def matrix_fallbacks(device: str, directory: Path | None = None) -> dict[str, str]:
    """ATen op -> the run that saw it fall back to the CPU on ``device`` (real runs only; empty when none)."""
    folder = directory or results_dir()
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")) if folder is not None else []:
        run = _read(path)
        plugin, hardware = run.get("plugin") or {}, run.get("hardware") or {}
        if plugin.get("name") != device or hardware.get("simulated") is not False:
            continue  # another device's run, a simulated one, or not a result file
        vendor = f"{plugin.get('vendor_package')} {plugin.get('vendor_version')}" if plugin.get("vendor_package") else "torch"
        chip = hardware.get("chip") or hardware.get("device_type")
        where = f"compat matrix {path.name} ({vendor} on {chip}, {str(run.get('started_at', '?'))[:10]})"
        for result in run.get("results") or []:
            for op in result.get("fallback_ops") or []:
                if isinstance(op, str) and op != HOST_READ:
                    found.setdefault(op, f"{where}: probe {result.get('probe')} ran it on the CPU")
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # a broken file is the matrix's problem (its render says so), not evidence here
    return data if isinstance(data, dict) and isinstance(data.get("results"), list) else {}
