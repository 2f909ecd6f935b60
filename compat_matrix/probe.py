"""The probe type plugins register, and the outcomes a probe can signal.

A probe is a function ``fn(ctx)`` that exercises one feature on the selected device. It
returns normally when the feature works, raises :class:`Skip` when the feature does not apply,
:class:`Partial` when it works only in part, and any other exception when it fails; the
stage it was in (``ctx.stage(...)``) says where. See :class:`anydevice.compat_matrix.execute.ProbeContext`.

Plugins add probes through the ``anydevice_register_probes(register)`` hook::

    from anydevice.compat_matrix.probe import Probe

    @hookimpl
    def anydevice_register_probes(register):
        register(Probe("mychip_special_op", "ops", my_probe_fn, description="..."))  # group "ops"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from anydevice.compat_matrix.execute import ProbeContext

GROUPS: Final = (
    "sanity",
    "placement",
    "compilation",
    "collectives",
    "profiling",
    "dtypes",
    "ops",
    "workloads",
    "parallel",
    "export",
    "compile",
)
"""The groups probes belong to: the four shims, dtypes, common ops, real workloads and model parallelism (plus
the gate), export to edge runtimes, and training steps compiled for a slice. A result file calls a probe's group
its ``shim``."""

EXPORT_GROUP: Final = "export"
"""The group of export probes: they run only for an export target (``anydevice matrix probe --target litert``)."""

EXPORT_TARGETS: Final[dict[str, tuple[str, ...]]] = {"litert": ("litert-torch", "ai-edge-litert")}
"""Export targets (``ad.export(target=...)``) and the packages whose versions an export run records."""

EXPORT_RUNS_ON: Final[dict[str, str]] = {
    "litert": "converted with litert-torch, run in LiteRT's CPU interpreter (ai-edge-litert) on the host CPU"
}
"""Where an export target's probes run: not a device plugin, the runtime's own interpreter on this host."""

COMPILE_GROUP: Final = "compile"
"""The group of compile probes: they run only for a slice target (``anydevice matrix probe --target tpu:v5e-8``):
each probe's training step is compiled for the slice by its vendor's compiler on the host CPU, never run."""

TARGET_GROUPS: Final = (EXPORT_GROUP, COMPILE_GROUP)
"""The groups whose probes run only for a ``--target`` (not on a device), and no device run takes."""


def target_group(target: str) -> str | None:
    """``"litert"`` -> the export group; a slice (``"tpu:v5e-8"``) -> the compile group; otherwise None."""
    if target in EXPORT_TARGETS:
        return EXPORT_GROUP
    from anydevice.preflight.compiled import split_target

    return COMPILE_GROUP if split_target(target)[1] is not None else None


def target_family(target: str) -> str:
    """What a target's probes name in ``params["target"]``: the export target, or a slice's device (``"tpu"``)."""
    return target if target in EXPORT_TARGETS else target.partition(":")[0]


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,99}$")


@dataclass(frozen=True)
class Probe:
    """One compatibility check.

    :param name: unique id, lower case (``[a-z0-9_.:-]``), used by ``--only`` and on the page.
    :param group: the group it belongs to; one of :data:`GROUPS` (plugins may add their own).
    :param fn: the check; called with a :class:`~anydevice.compat_matrix.execute.ProbeContext`.
    :param params: what varies between probes of one family (e.g. ``{"dtype": "bfloat16"}``).
    :param description: one sentence shown on the page.
    """

    name: str
    group: str
    fn: Callable[[ProbeContext], None]
    params: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"probe name {self.name!r} must match {_NAME.pattern}")
        if not _NAME.match(self.group):
            raise ValueError(f"probe {self.name!r}: group {self.group!r} must match {_NAME.pattern}")
        if not callable(self.fn):
            raise TypeError(f"probe {self.name!r}: fn must be callable")


class ProbeSignal(Exception):
    """Base of the exceptions a probe raises to report something other than pass or fail."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Skip(ProbeSignal):
    """The feature does not apply here (e.g. a dtype the device does not have); not a failure."""


class Partial(ProbeSignal):
    """The feature works only in part; ``reason`` says which part is missing."""


class HarnessError(ProbeSignal):
    """The harness (or the anydevice API it relies on) is at fault, not the device."""
