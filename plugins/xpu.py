"""The xpu plugin: Intel GPUs through torch.xpu."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.plugin import ALL_DTYPES, CheckFacts, Detection, DeviceSpec, Evidence, Serving, Shims, hookimpl
from anydevice.plugin import detection as d

DIST_BACKEND = "xccl"
"""The process-group backend, declared once: the collectives table and CHECK_FACTS read it."""
CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES,
    fallback="never",
    compile_backends=("inductor",),
    dist_backend=DIST_BACKEND,
    sources=("torch's XPU backend",),
)
"""What ``anydevice check`` reads for Intel GPUs (eager; an op without a kernel raises)."""

INTEL_PCI_VENDOR = "0x8086"


def _intel_gpus() -> list[str]:
    gpus = []
    for address, _device in d.pci_devices(INTEL_PCI_VENDOR):
        try:
            with open(f"/sys/bus/pci/devices/{address}/class") as handle:
                if handle.read().strip().startswith("0x03"):  # display controller
                    gpus.append(address)
        except OSError:
            continue
    return gpus


def detect() -> Detection:
    build = d.torch_build()
    if not build:
        return Detection.missing("torch is not installed", "pip install torch", "package_missing")
    gpus = _intel_gpus()
    if build.get("xpu") is None:
        reason = f"this torch build ({build.get('version')}) has no XPU support"
        if not gpus:
            reason += " and no Intel GPU was found"
        return Detection.missing(reason, "install torch's XPU build on a machine with an Intel GPU", "package_missing")
    if not gpus:
        return Detection.missing(
            "no Intel GPU found on the PCI bus", "run on a machine with an Intel Data Center or Arc GPU", "no_hardware"
        )
    import torch

    if not torch.xpu.is_available():
        return Detection.missing(
            "torch cannot use the Intel GPU (driver missing?)", "install Intel's GPU driver and runtime", "no_hardware"
        )
    count = torch.xpu.device_count()
    return Detection.ok(f"{count} Intel XPU device(s) visible", count=count, chip=torch.xpu.get_device_name(0))


def chip() -> str | None:
    import torch

    return str(torch.xpu.get_device_name(torch.xpu.current_device()))


def load() -> Shims:
    from anydevice.plugin import CollectivesTable, CompileTable, EagerVendor, ProfilingTable, eager_shims

    return eager_shims(
        EagerVendor(
            "xpu",
            compile=CompileTable(inductor=True),
            collectives=CollectivesTable(backend=DIST_BACKEND),
            profiling=ProfilingTable(activities=("XPU",), chip=chip),  # no peak table: no verified dense bf16 figure per SKU
        )
    )


SERVING = {
    "vllm": Serving(platforms=("xpu",), hint="install vLLM's XPU build (vLLM's installation guide, Intel GPU)"),
    "sglang": Serving(platforms=("xpu",), hint="install SGLang's XPU build"),
}
"""What serving engines run here (anydevice.integrations): their built-in XPU platforms."""


EVIDENCE = Evidence.declared("torch's XPU backend docs; never run on an Intel GPU in this project", "2026-12-03")
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="xpu",
            aliases=("intel",),
            detect=detect,
            load=load,
            priority=70,
            serving=SERVING,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )
