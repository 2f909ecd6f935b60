"""The plugin contract: the hooks a device plugin implements.

A plugin is a module found through the ``anydevice`` entry-point group. It must import
without its vendor library. It implements one or more of these hooks with ``@hookimpl``::

    from anydevice.plugin import DeviceSpec, Detection, hookimpl

    @hookimpl
    def anydevice_register_devices(register):
        register(DeviceSpec(name="mychip", detect=detect, load=load, priority=50))

The shims a device returns from ``load`` are in ``anydevice.shims.contracts``; docs/architecture.md
lists what a plugin must and may provide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import pluggy

if TYPE_CHECKING:
    from anydevice.contract.device_spec import Devices, DeviceSpec
    from anydevice.contract.diagnosis import Check, DoctorContext

PROJECT: Final = "anydevice"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def anydevice_register_devices(register: Callable[[DeviceSpec], None], registry: Devices) -> None:
    """Declare the devices this plugin provides.

    :param register: call it once per device with a :class:`~anydevice.contract.device_spec.DeviceSpec`.
        Registration must be cheap: no vendor import, no hardware probing (that is ``detect``'s job).
    :param registry: optional (leave it out of the signature unless needed): a read-only view
        (:class:`~anydevice.contract.device_spec.Devices`) of the devices being registered, for a device that builds on
        what other devices declare (the ``xla`` device reads their ``DeviceSpec.hardware``). Read it from
        ``detect``/``load``, not while registering.
    """


@hookspec
def anydevice_register_probes(register: Callable[[Any], None]) -> None:
    """Add compatibility-matrix probes.

    :param register: call it with a :class:`anydevice.compat_matrix.probe.Probe` per probe.
    """


@hookspec
def anydevice_doctor_checks(context: DoctorContext) -> list[Check]:
    """Judge the settings this plugin's devices read (``DeviceSpec.settings``), for ``anydevice doctor``.

    :param context: the registry and the user's selection (:class:`~anydevice.contract.diagnosis.DoctorContext`).
    :returns: one :class:`~anydevice.contract.diagnosis.Check` per variable that is set (none when unset): ``fail``
        with a fix when it breaks the selection, ``warn`` when it could, ``ok``/``info`` otherwise. Must not
        import torch or a vendor library. Core prints the checks in the settings section of the report.
    """
    raise NotImplementedError  # a specification: plugins implement it
