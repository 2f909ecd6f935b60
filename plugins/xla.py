"""The xla plugin: any PJRT device through torch_xla (CPU, TPU, CUDA, NEURON)."""

from __future__ import annotations

import os
from collections.abc import Callable

from anydevice.device_spec import Detection, DeviceSpec
from anydevice.errors import NotBuiltError
from anydevice.hookspecs import hookimpl
from anydevice.shims import versions
from anydevice.shims.contracts import Shims


def detect() -> Detection:
    pair = versions.check_pair("torch_xla")
    if pair is None:
        return Detection.missing(
            "torch_xla is not installed",
            "pip install torch_xla with the torch of the same major.minor (e.g. torch==2.9.0 torch_xla==2.9.0)",
            "package_missing",
        )
    if not pair.ok:
        return Detection.missing(pair.reason, pair.fix, "version_mismatch")
    pjrt = os.environ.get("PJRT_DEVICE") or "CPU"
    return Detection.ok(f"torch_xla {pair.package_version} with PJRT_DEVICE={pjrt}", chip=f"PJRT {pjrt}")


def load() -> Shims:
    raise NotBuiltError("The xla plugin's shims are not built yet.")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="xla", detect=detect, load=load, priority=-10, vendor_package="torch_xla",
            description="any PJRT device via torch_xla (auto never prefers it over cpu)",
        )
    )
