"""The xla plugin: any PJRT device through torch_xla (CPU, TPU, CUDA, NEURON)."""

from __future__ import annotations

import os
from collections.abc import Callable

from anydevice.device_spec import Detection, DeviceSpec
from anydevice.errors import NotBuiltError
from anydevice.hookspecs import hookimpl
from anydevice.shims import detect as d
from anydevice.shims.contracts import Shims


def detect() -> Detection:
    xla_version = d.version_of("torch_xla") or d.version_of("torch-xla")
    if xla_version is None:
        return Detection.missing("torch_xla is not installed", "pip install torch_xla==<your torch's major.minor>.* (e.g. torch==2.9.0 torch_xla==2.9.0)", "package_missing")
    torch_version = d.torch_version() or "?"
    if torch_version == "?" or d.major_minor(torch_version) != d.major_minor(xla_version):
        mm = ".".join(map(str, d.major_minor(xla_version)))
        return Detection.missing(
            f"torch_xla {xla_version} does not pair with torch {torch_version}",
            f"pip install torch=={mm}.* torch_xla=={xla_version} (they must share major.minor)",
            "version_mismatch",
        )
    pjrt = os.environ.get("PJRT_DEVICE") or "CPU"
    return Detection.ok(f"torch_xla {xla_version} with PJRT_DEVICE={pjrt}", count=None, chip=f"PJRT {pjrt}")


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
