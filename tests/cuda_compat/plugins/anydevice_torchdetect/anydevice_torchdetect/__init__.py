"""``torchdetect``: detection imports torch and counts CPU threads; the device maps onto the CPU (priority below cpu)."""

from __future__ import annotations

from typing import Any

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


def detect() -> Detection:
    import torch

    return Detection.ok(f"torch {torch.__version__} sees {torch.get_num_threads()} CPU threads", count=1)


def load() -> Any:
    from anydevice.shims.eager import EagerVendor, PlacementTable, eager_shims

    return eager_shims(EagerVendor("cpu", placement=PlacementTable(host=True)))


@hookimpl
def anydevice_register_devices(register: Any) -> None:
    register(DeviceSpec(name="torchdetect", detect=detect, load=load, priority=-5))
