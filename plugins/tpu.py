"""The tpu plugin: Google TPUs through TorchTPU (``torch_tpu``) first, torch_xla second."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from anydevice.device_spec import Detection, DeviceSpec
from anydevice.errors import NotBuiltError
from anydevice.hookspecs import hookimpl
from anydevice.shims import detect as d
from anydevice.shims.contracts import Shims

GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_DEVICE_IDS = {"0x005e": "v4", "0x0062": "v5p", "0x0063": "v5e", "0x006f": "v6e", "0x0076": "v7"}
INSTALL = "pip install torch_tpu (on a Cloud TPU VM; needs torch 2.11 to 2.15), or pip install torch_xla[tpu]"


def tpu_chips() -> list[str]:
    """Generations of the TPU chips on the PCI bus that have a VFIO node (what torch_tpu checks)."""
    chips = []
    for address, device_id in d.pci_devices(GOOGLE_PCI_VENDOR):
        generation = TPU_DEVICE_IDS.get(device_id)
        if generation and d.iommu_group_has_vfio(Path("/sys/bus/pci/devices") / address):
            chips.append(generation)
    return chips


def detect() -> Detection:
    native, xla = d.installed("torch_tpu"), d.installed("torch_xla")
    chips = tpu_chips()
    if not chips and not (native or xla):
        return Detection.missing("TorchTPU (torch_tpu) is not installed and no TPU chip was found", INSTALL, "package_and_hardware_missing")
    if not chips:
        which = "TorchTPU" if native else "torch_xla"
        return Detection.missing(f"{which} installed, no TPU chip found", "run on a Cloud TPU VM (PCI vendor 0x1ae0 with /dev/vfio)", "no_hardware")
    if not (native or xla):
        return Detection.missing(f"TPU {chips[0]} chip found but neither torch_tpu nor torch_xla is installed", INSTALL, "hardware_without_package")
    return Detection.ok(f"{len(chips)} TPU {chips[0]} chip(s); using {'TorchTPU' if native else 'torch_xla'}", count=len(chips), chip=f"TPU {chips[0]}")


def load() -> Shims:
    raise NotBuiltError("The tpu plugin's shims are not built yet.", "Use ANYDEVICE=xla with PJRT_DEVICE=TPU meanwhile.")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="tpu", detect=detect, load=load, priority=90, vendor_package="torch_tpu", autoload_module="torch_tpu", description="Google TPU (TorchTPU, else torch_xla)"))
