"""Per-op evidence from the project's compatibility-matrix results: ops a real run on a device ran on the CPU.

Each result file (``anydevice/compat_matrix/results/*.json``) names its device (``plugin.name``) and, per
probe, the ``fallback_ops`` the runtime counted. For ``anydevice check`` an op a real run of the target
counted is a CPU fallback there, with that run as its source. A simulated run (``hardware.simulated``,
the fake TorchNeuron) is no evidence, and a host read (``.item()``, counted by torch_xla) is reported by
check as a host read, not as an op.
"""

from __future__ import annotations

import functools
from pathlib import Path

from anydevice.strict import HOST_READS


def results_dir() -> Path:
    """Where the project's committed matrix result files are."""
    import anydevice.compat_matrix

    return Path(anydevice.compat_matrix.__file__).parent / "results"


@functools.cache
def matrix_fallbacks(device: str, directory: Path | None = None) -> dict[str, str]:
    """ATen op -> the run that saw it fall back to the CPU on ``device`` (real runs only; empty when none)."""
    from anydevice.compat_matrix.schema import ResultFileError, load_run

    found: dict[str, str] = {}
    for path in sorted((directory or results_dir()).glob("*.json")):
        try:
            run = load_run(path)
        except ResultFileError:
            continue  # a broken file is the matrix's problem (its render says so), not evidence here
        if run.plugin.name != device or run.hardware.simulated:
            continue
        vendor = f"{run.plugin.vendor_package} {run.plugin.vendor_version}" if run.plugin.vendor_package else "no vendor package"
        chip = run.hardware.chip or run.hardware.device_type
        where = f"compat matrix {path.name} ({vendor} on {chip}, {run.started_at:%Y-%m-%d})"
        for result in run.results:
            for op in result.fallback_ops:
                if op not in HOST_READS:
                    found.setdefault(op, f"{where}: probe {result.probe} ran it on the CPU")
    return found
