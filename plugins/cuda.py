"""The cuda plugin: NVIDIA CUDA and AMD ROCm (HIP reuses the ``cuda`` device type)."""

from __future__ import annotations

import os
from collections.abc import Callable

from anydevice.device_spec import Detection, DeviceSpec
from anydevice.hookspecs import hookimpl
from anydevice.shims import detect as d
from anydevice.shims.contracts import Shims

# Dense bf16 TFLOP/s per chip (vendor datasheets; the sparse figures are twice these).
PEAK_BF16_TFLOPS = {
    "H100": 989.4,  # NVIDIA H100 SXM datasheet
    "H200": 989.4,  # NVIDIA H200 datasheet (same compute as H100 SXM)
    "B200": 2250.0,  # NVIDIA HGX B200 datasheet
    "GB200": 2500.0,  # NVIDIA GB200 NVL72 datasheet, per GPU
    "A100": 312.0,  # NVIDIA A100 datasheet
    "MI300X": 1307.4,  # AMD Instinct MI300X datasheet
}
INSTALL_CUDA_TORCH = "install a CUDA (or ROCm) build of torch: pip install torch (Linux x86-64 wheels on PyPI include CUDA)"


def _hidden() -> bool:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1")


def detect() -> Detection:
    build = d.torch_build()
    if not build:
        return Detection.missing("torch is not installed", "pip install torch", "package_missing")
    rocm = build.get("hip") is not None
    if build.get("cuda") is None and not rocm:
        return Detection.missing(
            f"this torch build ({build.get('version')}) has no CUDA or ROCm support", INSTALL_CUDA_TORCH, "package_missing"
        )
    if _hidden():
        return Detection.missing(
            "CUDA_VISIBLE_DEVICES hides every GPU", "unset CUDA_VISIBLE_DEVICES or list the GPUs to use", "disabled"
        )
    if not (d.device_files("/dev/nvidia[0-9]*") or d.device_files("/dev/kfd") or os.path.isdir("/proc/driver/nvidia")):
        return Detection.missing(
            "no NVIDIA or AMD GPU driver found (/dev/nvidia*, /dev/kfd)",
            "run on a machine with a GPU and its driver installed",
            "no_hardware",
        )
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # keeps the check fork-safe
    import torch

    if not torch.cuda.is_available():
        return Detection.missing(
            "torch cannot use the GPU (driver too old for this torch build, or no device visible)",
            "check `nvidia-smi` (or `rocm-smi`) and match the torch build to the driver",
            "no_hardware",
        )
    count = torch.cuda.device_count()
    return Detection.ok(f"{count} {'ROCm' if rocm else 'CUDA'} device(s) visible", count=count, chip=torch.cuda.get_device_name(0))


def chip() -> str | None:
    import torch

    name = torch.cuda.get_device_name(torch.cuda.current_device())
    for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if key in name.replace(" ", "").upper():
            return key
    return name


def _autocast_dtype() -> object:
    import torch

    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _versions() -> dict[str, str]:
    import torch

    out = {"cuda": str(torch.version.cuda)} if torch.version.cuda else {}
    if torch.version.hip:
        out["hip"] = str(torch.version.hip)
    if torch.backends.cudnn.is_available():
        out["cudnn"] = str(torch.backends.cudnn.version())
    return out


def load() -> Shims:
    from anydevice.shims.eager import EagerVendor, eager_shims

    return eager_shims(
        EagerVendor(
            device_type="cuda",
            compile_backend="inductor",
            dist_backend="nccl",  # RCCL under the same name on ROCm
            autocast_dtype=_autocast_dtype,  # type: ignore[arg-type]
            profiler_activities=("CUDA",),
            chip=chip,
            peak_tflops=PEAK_BF16_TFLOPS,
            versions=_versions,
        )
    )


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="cuda",
            aliases=("gpu", "rocm"),
            detect=detect,
            load=load,
            priority=80,
            vendor_package="torch",
            description="NVIDIA CUDA or AMD ROCm GPUs",
        )
    )
