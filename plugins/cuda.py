"""The cuda plugin: NVIDIA CUDA and AMD ROCm (HIP reuses the ``cuda`` device type)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from anydevice.plugin import (
    ALL_DTYPES,
    FP8,
    CheckFacts,
    Chip,
    Detection,
    DeviceSpec,
    Evidence,
    GiB,
    Hardware,
    ModelServer,
    Serving,
    Setting,
    Shims,
    hookimpl,
)
from anydevice.plugin import chips as catalogue
from anydevice.plugin import detection as d

if TYPE_CHECKING:
    import torch

    from anydevice.plugin import Check, DoctorContext

NAME = "cuda"
NODE_GLOBS = ("/dev/nvidia[0-9]*", "/dev/kfd")
"""Device nodes of NVIDIA GPUs and of AMD's ROCm driver."""
DIST_BACKEND = "nccl"
"""The process-group backend (RCCL under the same name on ROCm), declared once: the collectives table and CHECK_FACTS read it."""
NVIDIA = "NVIDIA datasheets (dense figures: the sparse ones are twice these)"
HOST = catalogue.host_shapes(*range(1, 9))
"""A GPU server runs 1 to 8 GPUs (an HGX board); a pod asks for a count of them."""
CHIPS = (
    Chip(
        "h200",
        "H200",
        NVIDIA + "; H200 datasheet",
        "2026-12-07",
        pci_ids=("0x2335",),
        hbm_bytes=141 * 10**9,
        hbm_bandwidth=4.8e12,
        peak_bf16=989.4e12,
        peak_fp8=1978.9e12,
        interconnect_bandwidth=900e9,
        shapes=HOST,
        llmd_label="h200",
    ),
    Chip(
        "h100",
        "H100",
        NVIDIA + "; H100 SXM datasheet",
        "2026-12-07",
        aliases=("h100sxm",),
        pci_ids=("0x2330",),
        hbm_bytes=80 * GiB,
        hbm_bandwidth=3.35e12,
        peak_bf16=989.4e12,
        peak_fp8=1978.9e12,
        interconnect_bandwidth=900e9,
        shapes=HOST,
        llmd_label="h100",
    ),
    Chip(
        "b200",
        "B200",
        NVIDIA + "; HGX B200 datasheet",
        "2026-12-07",
        pci_ids=("0x2901",),
        hbm_bytes=180 * 10**9,
        hbm_bandwidth=8e12,
        peak_bf16=2250e12,
        peak_fp8=4500e12,
        interconnect_bandwidth=1.8e12,
        shapes=HOST,
        llmd_label="b200",
    ),
    Chip(
        "a100",
        "A100",
        NVIDIA + "; A100 80GB SXM datasheet",
        "2026-12-07",
        pci_ids=("0x20b2",),
        hbm_bytes=80 * GiB,
        hbm_bandwidth=2.039e12,
        peak_bf16=312e12,
        interconnect_bandwidth=600e9,
        shapes=HOST,
        llmd_label="a100",
    ),
    Chip("l40s", "L40S", "declared: llm-d's label only", "2026-12-07", shapes=HOST, llmd_label="l40s"),
    Chip("l4", "L4", "declared: llm-d's label only", "2026-12-07", shapes=HOST, llmd_label="l4"),
    Chip(
        "h100pcie",
        "H100 PCIe",
        NVIDIA + "; H100 PCIe datasheet",
        "2026-12-07",
        pci_ids=("0x2331",),
        hbm_bytes=80 * GiB,
        hbm_bandwidth=2.0e12,
        peak_bf16=756.5e12,
        peak_fp8=1513e12,
        shapes=HOST,
    ),
    Chip("h100nvl", "H100 NVL", "declared: its datasheet peak differs from SXM's and is not tabled", "2026-12-07", shapes=HOST),
    Chip("gb200", "GB200", NVIDIA + "; GB200 NVL72 datasheet, per GPU", "2026-12-07", peak_bf16=2500e12, shapes=HOST),
    Chip(
        "mi300x",
        "MI300X",
        "AMD Instinct MI300X datasheet",
        "2026-12-07",
        pci_ids=("0x74a1",),
        hbm_bytes=192 * GiB,
        hbm_bandwidth=5.3e12,
        peak_bf16=1307.4e12,
        peak_fp8=2614.9e12,
        shapes=HOST,
    ),
)
"""The GPUs, each fact once; the first that declares an llm-d label (H200) is serve-spec's default. A GPU not
listed has no peak: MFU is reported as unknown, never guessed from a neighbour."""
CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES | FP8,  # fp8 matmuls need Hopper (H100) or later; the types exist on every CUDA build
    memory_per_chip=catalogue.memory_per_chip(CHIPS),
    fallback="never",  # an op without a CUDA kernel raises; nothing runs on the CPU silently
    compile_backends=("inductor",),
    runs_cuda_calls=True,
    dist_backend=DIST_BACKEND,
    lacking_reduce_ops=frozenset(),  # NCCL has every ReduceOp; checked against the collectives shim at load
    sources=("NVIDIA and AMD datasheets (memory per GPU)",),
)
"""What ``anydevice check`` reads for CUDA GPUs (eager, dynamic shapes; every torch op has a CUDA kernel)."""
PEAK_BF16_TFLOPS = catalogue.peaks_tflops(CHIPS)
"""Dense bf16 TFLOP/s per GPU model, read from :data:`CHIPS`."""
CUDA_VISIBLE_DEVICES = Setting(
    "CUDA_VISIBLE_DEVICES",
    'Which NVIDIA/AMD GPUs the process sees; `""`, `-1`, `none` or `NoDevFiles` hides every GPU. `anydevice doctor` reports it.',
    owner="CUDA",
)
INSTALL_CUDA_TORCH = "install a CUDA (or ROCm) build of torch: pip install torch (Linux x86-64 wheels on PyPI include CUDA)"


def chip_from_name(name: str) -> str:
    """The chip's model for a device name (``NVIDIA H100 80GB HBM3`` -> ``H100``), or the name itself."""
    chip = catalogue.chip_in_text(CHIPS, name)
    return chip.model if chip is not None else name


def hides_every_gpu(value: str) -> bool:
    """True when ``CUDA_VISIBLE_DEVICES=value`` leaves no GPU.

    The driver reads entries up to the first that is not an index or a ``GPU-``/``MIG-`` UUID, so
    an empty value, ``-1``, ``none`` or Slurm's ``NoDevFiles`` hide every GPU.
    """
    first = value.split(",", 1)[0].strip()
    return not (first.isdigit() or first.upper().startswith(("GPU-", "MIG-")))


def _hidden() -> bool:
    value = os.environ.get(CUDA_VISIBLE_DEVICES.name)  # "" hides every GPU, so no .get() default
    return value is not None and hides_every_gpu(value)


def gpu_nodes() -> list[str]:
    """The GPU device nodes of this machine (NVIDIA and ROCm), found without importing anything."""
    return [node for pattern in NODE_GLOBS for node in d.device_files(pattern)]


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
    if not (gpu_nodes() or os.path.isdir("/proc/driver/nvidia")):
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
    return Detection.ok(
        f"{count} {'ROCm' if rocm else 'CUDA'} device(s) visible",
        count=count,
        chip=chip_from_name(torch.cuda.get_device_name(0)),
        stack="rocm" if rocm else "cuda",
    )


def chip() -> str | None:
    import torch

    return chip_from_name(torch.cuda.get_device_name(torch.cuda.current_device()))


def _autocast_dtype() -> torch.dtype:
    import torch

    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _versions() -> dict[str, str]:
    import torch

    out = {"cuda": str(torch.version.cuda)} if torch.version.cuda else {}
    if torch.version.hip:
        out["hip"] = str(torch.version.hip)
    cudnn: Any = torch.backends.cudnn  # its functions are untyped in torch's stubs
    if cudnn.is_available():
        out["cudnn"] = str(cudnn.version())
    return out


def load() -> Shims:
    from anydevice.plugin import CollectivesTable, CompileTable, EagerVendor, PlacementTable, ProfilingTable, eager_shims

    return eager_shims(
        EagerVendor(
            "cuda",
            placement=PlacementTable(autocast_dtype=_autocast_dtype),
            compile=CompileTable(inductor=True),
            collectives=CollectivesTable(backend=DIST_BACKEND),
            # kineto's CUDA activity records HIP kernels on ROCm too
            profiling=ProfilingTable(activities=("CUDA",), chip=chip, peak_tflops=PEAK_BF16_TFLOPS),
            versions=_versions,
        )
    )


SERVING = {
    "vllm": Serving(
        platforms=("cuda", "rocm"),
        hint="pip install vllm (the CUDA build; on ROCm, AMD's vLLM build)",
        visible_devices="CUDA_VISIBLE_DEVICES",  # ANYDEVICE=cuda:1: vLLM drives GPU 1 alone
        model_server=ModelServer(
            image="docker.io/vllm/vllm-openai:v0.26.0",
            resource="nvidia.com/gpu",
            connector={"kv_connector": "NixlConnector"},
            env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "$(POD_IP)"},
            args=("--block-size=128",),
            labels={"llm-d.ai/accelerator-vendor": "nvidia"},
            source="llm-d v0.9.0 guides/pd-disaggregation/modelserver/gpu/vllm (image: its component images/gpu-vllm, "
            "vllm-openai, at the release's vLLM v0.26.0; the vendor and variant labels are declared here, the GPU overlay "
            "sets none)",
        ),
    ),
    "sglang": Serving(platforms=("cuda", "rocm"), hint="pip install sglang (on ROCm, AMD's SGLang build)"),
}
"""What serving engines run here (anydevice.integrations): their built-in CUDA platform, else ROCm."""


EVIDENCE = Evidence.declared("torch's CUDA backend and NVIDIA/AMD datasheets; never run on a GPU in this project", "2026-12-03")
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name=NAME,
            aliases=("gpu", "rocm"),
            detect=detect,
            load=load,
            priority=80,
            vendor_package="torch",
            settings=(CUDA_VISIBLE_DEVICES,),
            hardware=Hardware(pjrt_names=("CUDA", "GPU"), scan=gpu_nodes, ray_resource="GPU"),
            serving=SERVING,
            chips=CHIPS,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )


@hookimpl
def anydevice_doctor_checks(context: DoctorContext) -> list[Check]:
    """``CUDA_VISIBLE_DEVICES`` that hides every GPU: fails when cuda is asked for, warns on a GPU machine."""
    from anydevice.plugin import Check

    name = CUDA_VISIBLE_DEVICES.name
    value = os.environ.get(name)
    if value is None or not hides_every_gpu(value):
        return []
    shown = f"{name}={value!r}"
    fix = f"unset {name}, or list the GPUs to use, e.g. {name}=0,1"
    if NAME in context.requested_names:
        return [Check(name, "fail", f"{shown} hides every GPU but ANYDEVICE={context.requested} asks for {NAME}", fix)]
    if gpu_nodes():
        return [Check(name, "warn", f"{shown} hides every GPU of this machine: auto will not pick {NAME}", fix)]
    return [Check(name, "info", f"{shown} hides every GPU (this machine has none anyway)")]
