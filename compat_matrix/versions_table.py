"""The page's versions table: the torch / vendor-package pairs each plugin supports, and which pairs ran here.

"Supports" is read from what the plugins declare: each built-in device's ``vendor_package`` and the
pairing rule anydevice's version preflight applies to that package (lockstep ``x.y`` with torch
``x.y``, or the package's own ``Requires-Dist`` on torch). "Ran here" is read from the result files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata

from anydevice.compat_matrix.merge import Column, Matrix

TORCH_RANGE = ("2.9", "2.15")
"""The torch releases anydevice supports (README: "torch 2.9 to 2.15")."""


@dataclass
class PluginVersions:
    """One plugin's row: its devices, vendor package, the pairs it supports and the columns that ran it."""

    plugin: str
    devices: list[str] = field(default_factory=list)
    vendor_package: str | None = None
    supported: str = ""
    columns: list[Column] = field(default_factory=list)


def supported_text(vendor_package: str | None, rule: object = None) -> str:
    """The torch / vendor pairs a device with ``vendor_package`` supports, in words.

    ``rule`` is what the plugin declares for the package in ``DeviceSpec.paired_packages``:
    ``"lockstep"``, ``"requires_dist"``, a function of the installed version, or None.
    """
    low, high = TORCH_RANGE
    if vendor_package is None:
        return f"torch {low} to {high}: the device is built into torch"
    if vendor_package == "torch":
        return f"torch {low} to {high} (its CUDA or ROCm build)"
    if rule == "lockstep":
        return f"{vendor_package} x.y with torch x.y (lockstep), for torch {low} to {high}"
    if rule == "requires_dist":
        return f"the torch range {vendor_package}'s own metadata declares (Requires-Dist), within torch {low} to {high}"
    if callable(rule):
        return (
            f"{vendor_package} with torch {low} to {high}; the pairing rule depends on the installed "
            f"{vendor_package} release (lockstep or its own Requires-Dist), checked before import"
        )
    return f"{vendor_package} with torch {low} to {high}; the plugin declares no pairing rule"


def _builtin_devices() -> list[tuple[str, str, str | None, object]]:
    """``(plugin, device, vendor_package, pairing rule)`` for every plugin anydevice itself ships."""
    try:
        dist = metadata.distribution("anydevice")
    except metadata.PackageNotFoundError:
        return []
    from anydevice.registry import Registry

    modules = []
    for ep in sorted((e for e in dist.entry_points if e.group == "anydevice"), key=lambda e: e.name):
        try:
            modules.append((ep.name, ep.load(), "anydevice"))
        except Exception:  # a plugin that cannot load is the registry's to report, not the page's
            continue
    registry = Registry(plugins=modules)  # the built-in plugins only, whatever ANYDEVICE_PLUGINS says
    entries = sorted((registry.get(name) for name in registry.names()), key=lambda e: (e.plugin, e.spec.name))
    return [
        (e.plugin, e.spec.name, e.spec.vendor_package, dict(e.spec.paired_packages).get(e.spec.vendor_package or ""))
        for e in entries
    ]


def plugin_versions(matrix: Matrix, builtin: Iterable[tuple[str, str, str | None, object]] | None = None) -> list[PluginVersions]:
    """One row per plugin: every built-in one, plus any plugin a result file names."""
    rows: dict[str, PluginVersions] = {}
    rules: dict[str, object] = {}
    for plugin, device, vendor, rule in _builtin_devices() if builtin is None else builtin:
        row = rows.setdefault(plugin, PluginVersions(plugin, vendor_package=vendor))
        row.devices.append(device)
        rules.setdefault(plugin, rule)
    for column in matrix.columns:
        run = column.runs[0].run
        row = rows.setdefault(run.plugin.name, PluginVersions(run.plugin.name, [run.hardware.device_type]))
        if row.vendor_package is None and run.plugin.vendor_package:
            row.vendor_package = run.plugin.vendor_package
        row.columns.append(column)
    for row in rows.values():
        row.supported = supported_text(row.vendor_package, rules.get(row.plugin))
    return sorted(rows.values(), key=lambda r: (not r.columns, r.plugin))


def ran_pair(column: Column) -> str:
    """The torch / vendor pair a column ran, in words."""
    run = column.runs[0].run
    pair = f"torch {run.env.torch or '?'}"
    if run.plugin.vendor_package and run.plugin.vendor_package != "torch":
        pair += f" + {run.plugin.vendor_package} {run.plugin.vendor_version or '?'}"
    return pair
