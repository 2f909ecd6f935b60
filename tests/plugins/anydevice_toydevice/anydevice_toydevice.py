"""A complete third-party anydevice plugin: the ``toy`` device.

It computes on the host CPU but declares its own name, alias, chip and peak FLOP/s, so the
tests (and docs/plugins.md) can show discovery, selection and MFU end to end without hardware.
"""

from __future__ import annotations

from collections.abc import Callable

from anydevice.plugin import Detection, DeviceSpec, Hardware, Shims, hookimpl

CHIP = "ToyChip-1"
PEAK_TFLOPS = {CHIP: 1.0}  # dense bf16 TFLOP/s: a made-up chip with a round number


def detect() -> Detection:
    return Detection.ok("the toy device runs on the host CPU", count=1, chip=CHIP)


def load() -> Shims:
    from anydevice.plugin import CompileTable, EagerVendor, PlacementTable, ProfilingTable, eager_shims

    profiling = ProfilingTable(chip=lambda: CHIP, peak_tflops=PEAK_TFLOPS)
    return eager_shims(
        EagerVendor("cpu", placement=PlacementTable(host=True), compile=CompileTable(inductor=True), profiling=profiling)
    )


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="toy",
            aliases=("toydevice",),
            detect=detect,
            load=load,
            priority=-5,  # below cpu: installing it never changes what `auto` picks
            vendor_package="anydevice-toydevice",
            hardware=Hardware(ray_resource="toy_chip"),  # a Ray worker on it asks for one toy_chip (a custom resource)
        )
    )
