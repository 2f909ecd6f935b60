"""Cheap detection helpers: installed packages and their versions, device files, PCI scans.

Nothing here imports torch or a vendor library, so plugins can detect hardware and packages
before anything heavy is loaded.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from importlib import metadata
from pathlib import Path


def installed(module: str) -> bool:
    """True when ``module`` can be imported (found on sys.path), without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version_of(distribution: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def major_minor(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``2.9.0+cpu``."""
    parts = version.split("+", 1)[0].split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def torch_version() -> str | None:
    """torch's installed version, read from its metadata (torch is not imported)."""
    return version_of("torch")


def device_files(pattern: str) -> list[str]:
    """Device nodes matching a glob, e.g. ``/dev/neuron*``."""
    return sorted(glob.glob(pattern))


def pci_devices(vendor_id: str, root: str = "/sys/bus/pci/devices") -> list[tuple[str, str]]:
    """``(pci address, device id)`` of every PCI function from ``vendor_id`` (e.g. ``0x1ae0``)."""
    found: list[tuple[str, str]] = []
    base = Path(root)
    if not base.is_dir():
        return found
    for entry in sorted(base.iterdir()):
        try:
            vendor = (entry / "vendor").read_text().strip().lower()
            if vendor == vendor_id.lower():
                found.append((entry.name, (entry / "device").read_text().strip().lower()))
        except OSError:
            continue
    return found


def iommu_group_has_vfio(pci_dir: Path, vfio_root: str = "/dev/vfio") -> bool:
    """True when the PCI device's IOMMU group has a ``/dev/vfio/<group>`` node."""
    try:
        group = os.path.basename(os.readlink(pci_dir / "iommu_group"))
    except OSError:
        return False
    return os.path.exists(os.path.join(vfio_root, group))


def torch_build() -> dict[str, str | None]:
    """What the installed torch was built for, read from ``torch/version.py`` as text so torch is not imported.

    Every top-level ``name = 'text'`` (or ``None``) assignment of that file, leading/trailing
    underscores stripped: ``version``, ``git_version`` and one entry per accelerator stack torch
    knows (``None`` where this build lacks it); plugins read their own. Empty when torch is not installed.
    """
    import re

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = path.read_text()
    except OSError:
        return {}
    build: dict[str, str | None] = {}
    for key, value in re.findall(r"^(\w+)\s*(?::[^=\n]*)?=\s*(None|'[^'\n]*'|\"[^\"\n]*\")\s*$", text, re.MULTILINE):
        build[key.strip("_")] = None if value == "None" else value[1:-1]
    return build


def accelerator_builds(build: dict[str, str | None]) -> dict[str, str]:
    """The accelerator stacks of a :func:`torch_build` (name -> version), without torch's own version fields."""
    return {k: v for k, v in build.items() if v is not None and k not in ("version", "git_version")}
