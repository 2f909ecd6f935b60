"""What a plugin declares about a device: :class:`DeviceSpec`, and what detection finds: :class:`Detection`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from anydevice.versions import PairRule

if TYPE_CHECKING:
    from anydevice.shims.contracts import Shims

Problem = Literal[
    "package_missing",  # the vendor package is not installed
    "no_hardware",  # the package is there but no chip / driver was found
    "package_and_hardware_missing",
    "hardware_without_package",  # a chip was found but the package is missing
    "version_mismatch",  # torch and the vendor package do not pair
    "plugin_error",  # the plugin raised during detection
    "disabled",  # turned off by the environment (e.g. CUDA_VISIBLE_DEVICES="")
    "unsupported_platform",  # wrong OS / torch build
]


@dataclass(frozen=True)
class Detection:
    """The result of a plugin's cheap availability check.

    ``reason`` is one sentence a user understands; ``fix`` says what to do when unavailable.
    """

    available: bool
    reason: str
    fix: str | None = None
    problem: Problem | None = None
    count: int | None = None
    chip: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def ok(cls, reason: str, *, count: int | None = None, chip: str | None = None, **details: str) -> Detection:
        """An available device."""
        return cls(True, reason, count=count, chip=chip, details=details)

    @classmethod
    def missing(cls, reason: str, fix: str | None, problem: Problem, **details: str) -> Detection:
        """An unavailable device, with the problem kind and the fix."""
        return cls(False, reason, fix=fix, problem=problem, details=details)


@dataclass(frozen=True)
class DeviceSpec:
    """A device a plugin provides.

    :param name: the selection name (``ANYDEVICE=name``), lower case.
    :param detect: cheap check; must not import the vendor library where that can be avoided.
    :param load: imports the vendor library and returns the four shims; called once, on selection.
    :param priority: ``auto`` picks the available device with the highest priority (cpu is 0).
    :param aliases: other names that select this device (``gpu`` for cuda).
    :param vendor_package: the Python distribution the device needs (for versions and doctor).
    :param description: one line for ``anydevice list``.
    :param verified_on_hardware: False when the plugin was only tested against a simulated vendor module.
    :param prepare_environment: sets variables the vendor reads at import; called before ``load``.
    :param autoload_module: the package torch's ``torch.backends`` autoload imports for this device.
    :param unsupported: features the plugin declares it does not support: compatibility-matrix probe
        name -> one sentence saying why. Every probe not listed is claimed supported; the matrix sets
        each claim against what the probe observed.
    :param vendor_modules: top-level modules the device imports once selected (``info`` and ``doctor``
        report which of them a process has imported).
    :param paired_packages: distributions whose version must pair with torch's -> the rule
        (``lockstep`` or ``requires_dist``), or a function of the installed version giving the rule
        (for a package whose versioning changed); ``doctor`` checks each before anything is imported.
    :param pjrt_names: ``PJRT_DEVICE`` values that mean this device's hardware (``TPU``; ``CUDA`` and ``GPU``).
    :param find_hardware: cheap scan for the device's chips or device nodes, needing no package and
        importing nothing; returns one entry per chip or node found. Other plugins use it through the
        registry (the ``xla`` device checks the hardware behind ``PJRT_DEVICE`` with it).
    :param ray_resource: the Ray resource one worker of this device asks for (``GPU``, ``TPU``), or a
        function that decides at launch time; None: a worker needs only a CPU.
    :param environment: variables that steer the device, which ``doctor`` judges through the plugin's
        ``anydevice_doctor_checks`` hook (listed on its summary line when none conflicts).
    """

    name: str
    detect: Callable[[], Detection]
    load: Callable[[], Shims]
    priority: int = 0
    aliases: tuple[str, ...] = ()
    vendor_package: str | None = None
    description: str = ""
    verified_on_hardware: bool = True
    prepare_environment: Callable[[], None] | None = None
    """Optional: set environment variables the vendor reads at import (called before ``load``)."""
    autoload_module: str | None = None
    """The module torch's backend autoload would import for this device (``torch_tpu``), if any."""
    unsupported: Mapping[str, str] = field(default_factory=dict)
    """Probe name -> why the plugin does not support it (what the matrix expects to fail or skip)."""
    vendor_modules: tuple[str, ...] = ()
    """Top-level modules the device imports once selected (``torch_xla``); reported by ``info``/``doctor``."""
    paired_packages: Mapping[str, PairRule | Callable[[str], PairRule]] = field(default_factory=dict)
    """Distribution -> how its version must pair with torch's (or version -> rule); ``doctor`` checks each one."""
    pjrt_names: tuple[str, ...] = ()
    """``PJRT_DEVICE`` values that name this device's hardware."""
    find_hardware: Callable[[], list[str]] | None = None
    """Cheap hardware scan (no package needed, nothing imported): one entry per chip or device node."""
    ray_resource: str | Callable[[], str | None] | None = None
    """The Ray resource one worker asks for, or a function deciding it at launch; None: CPU only."""
    environment: tuple[str, ...] = ()
    """Variables that steer the device; the plugin's ``anydevice_doctor_checks`` hook judges them."""
