"""The plugin API: everything a device plugin imports, from one place (docs/plugins.md).

A plugin (built-in or third-party) imports only ``anydevice.plugin`` and ``anydevice.errors``::

    from anydevice.plugin import Detection, DeviceSpec, hookimpl

    def load():
        from anydevice.plugin import CompileTable, EagerVendor, eager_shims  # imports torch: only in load()

        return eager_shims(EagerVendor("mychip", compile=CompileTable(backend="mychip")))

What is here, by concern:

- **declaring a device**: :class:`DeviceSpec` and its sections (:class:`Hardware`, :class:`Launch`, :class:`Serving`),
  its chips catalogue (:class:`Chip`, :class:`SliceShape`; the ``chips`` module's lookups and helpers),
  :class:`Detection` and its :data:`Problem` kinds, :class:`Setting` (the variables a device reads),
  :class:`Evidence` (what stands behind the plugin: ran on the chip, compiled, stand-in, declared, unknown);
- **hooks**: :data:`hookimpl` and the hook specifications (:func:`anydevice_register_devices`,
  :func:`anydevice_register_probes`, :func:`anydevice_doctor_checks`), :class:`Devices` (the read-only view
  of the registered devices a hook receives), :class:`Check` and :class:`DoctorContext` (doctor checks);
- **cheap detection helpers** (no vendor import): the ``detection`` module (``installed``, ``version_of``,
  ``device_files``, ``pci_devices``, ``torch_build``) and ``versions`` (``check_pair``, ``PairRule``);
- **settings**: :class:`Setting` and the ``settings`` module (core's variables, ``cache_dir``);
- **the shim contract**: :class:`Placement`, :class:`Compilation`, :class:`Collectives`,
  :class:`Profiling`, :class:`Shims`, and the optional capabilities :class:`Diagnostics`,
  :class:`CudaShaped`, :class:`HostTransfer`;
- **shared implementations** (tables a vendor fills in): :class:`EagerVendor` with its sections
  :class:`PlacementTable`, :class:`CompileTable`, :class:`CollectivesTable`, :class:`ProfilingTable`, and
  :func:`eager_shims` (these import torch: use them inside ``load``); :class:`XlaVendor` and
  :func:`xla_shims` (torch_xla devices; the ``lazy_xla`` module has the rest);
- **ranks** of the launched process: :func:`rank`, :func:`local_rank`, :func:`world_size`.

Importing this package imports neither torch nor a vendor library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.contract import chips, versions
from anydevice.contract import detect as detection
from anydevice.contract.check_facts import ALL_DTYPES, FP8, NO_DOUBLE, CheckFacts, GiB, OpTable, SliceCompiler
from anydevice.contract.chips import Chip, SliceShape
from anydevice.contract.device_spec import (
    DEFAULT_PRIORITY,
    NAME_PATTERN,
    PRIORITY_RANGE,
    Detection,
    Devices,
    DeviceSpec,
    Hardware,
    Launch,
    ModelServer,
    Problem,
    Serving,
)
from anydevice.contract.diagnosis import Check, DoctorContext, Status
from anydevice.contract.evidence import Evidence
from anydevice.contract.hookspecs import anydevice_doctor_checks, anydevice_register_devices, anydevice_register_probes, hookimpl
from anydevice.contract.versions import PairRule, check_pair
from anydevice.settings import Setting, local_rank, rank, world_size
from anydevice.shims import lazy_xla, tpu_compiler, tpu_slices
from anydevice.shims.contracts import (
    Collectives,
    Compilation,
    CudaShaped,
    Diagnostics,
    HostTransfer,
    MemoryStats,
    Placement,
    Profiling,
    Shims,
    TraceSession,
    accelerator_matches,
    torch_device_module,
)
from anydevice.shims.lazy_xla import XlaVendor, xla_shims

if TYPE_CHECKING:
    from anydevice.shims.eager import CollectivesTable, CompileTable, EagerVendor, PlacementTable, ProfilingTable, eager_shims

_EAGER = ("EagerVendor", "eager_shims", "PlacementTable", "CompileTable", "CollectivesTable", "ProfilingTable")
"""Names served from ``anydevice.shims.eager`` on first use (it imports torch)."""

__all__ = [
    "ALL_DTYPES",
    "DEFAULT_PRIORITY",
    "FP8",
    "NAME_PATTERN",
    "NO_DOUBLE",
    "PRIORITY_RANGE",
    "Check",
    "CheckFacts",
    "Chip",
    "Collectives",
    "CollectivesTable",
    "Compilation",
    "CompileTable",
    "CudaShaped",
    "Detection",
    "DeviceSpec",
    "Devices",
    "Diagnostics",
    "DoctorContext",
    "EagerVendor",
    "Evidence",
    "GiB",
    "Hardware",
    "HostTransfer",
    "Launch",
    "MemoryStats",
    "ModelServer",
    "OpTable",
    "PairRule",
    "Placement",
    "PlacementTable",
    "Problem",
    "Profiling",
    "ProfilingTable",
    "Serving",
    "Setting",
    "Shims",
    "SliceCompiler",
    "SliceShape",
    "Status",
    "TraceSession",
    "XlaVendor",
    "accelerator_matches",
    "anydevice_doctor_checks",
    "anydevice_register_devices",
    "anydevice_register_probes",
    "check_pair",
    "chips",
    "detection",
    "eager_shims",
    "hookimpl",
    "lazy_xla",
    "local_rank",
    "rank",
    "settings",
    "torch_device_module",
    "tpu_compiler",
    "tpu_slices",
    "versions",
    "world_size",
    "xla_shims",
]


def __getattr__(name: str) -> Any:
    if name in _EAGER:
        from anydevice.shims import eager

        return getattr(eager, name)
    raise AttributeError(f"module 'anydevice.plugin' has no attribute {name!r}")
