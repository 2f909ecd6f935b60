"""A plugin whose detection raises."""

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


def detect() -> Detection:
    raise RuntimeError("driver query failed")


def load() -> None:
    raise AssertionError("never loaded: detection fails")


@hookimpl
def anydevice_register_devices(register):  # type: ignore[no-untyped-def]
    register(DeviceSpec(name="flaky", detect=detect, load=load, priority=100))  # type: ignore[arg-type]
