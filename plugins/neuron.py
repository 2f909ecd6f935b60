"""The neuron plugin: AWS Trainium/Inferentia through torch-neuronx (native TorchNeuron 2.14+, else XLA)."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.device_spec import Detection, DeviceSpec
from anydevice.errors import NotBuiltError
from anydevice.hookspecs import hookimpl
from anydevice.shims import detect as d
from anydevice.shims.contracts import Shims

INSTALL = "pip install torch-neuronx from AWS's Neuron index (https://pip.repos.neuron.amazonaws.com) on a Trn/Inf instance"


def detect() -> Detection:
    package = d.installed("torch_neuronx")
    devices = d.device_files("/dev/neuron[0-9]*")
    if not package and not devices:
        return Detection.missing("torch-neuronx is not installed and no Neuron device was found", INSTALL, "package_and_hardware_missing")
    if not devices:
        return Detection.missing("torch-neuronx installed, no Neuron device found (/dev/neuron*)", "run on a Trainium (trn1/trn2) or Inferentia instance", "no_hardware")
    if not package:
        return Detection.missing(f"{len(devices)} Neuron device(s) found but torch-neuronx is not installed", INSTALL, "hardware_without_package")
    return Detection.ok(f"{len(devices)} Neuron device(s)", count=len(devices))


def load() -> Shims:
    raise NotBuiltError("The neuron plugin's shims are not built yet.")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="neuron", aliases=("trainium", "inferentia"), detect=detect, load=load, priority=85,
            vendor_package="torch-neuronx", autoload_module="torch_neuronx", description="AWS Trainium / Inferentia (torch-neuronx)", verified_on_hardware=False,
        )
    )
