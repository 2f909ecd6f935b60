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
from anydevice.plugin import detection as d

if TYPE_CHECKING:
    import torch

    from anydevice.plugin import Check, DoctorContext

NAME = "cuda"
NODE_GLOBS = ("/dev/nvidia[0-9]*", "/dev/kfd")
"""Device nodes of NVIDIA GPUs and of AMD's ROCm driver."""
DIST_BACKEND = "nccl"
"""The process-group backend (RCCL under the same name on ROCm), declared once: the collectives table and CHECK_FACTS read it."""
CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES | FP8,  # fp8 matmuls need Hopper (H100) or later; the types exist on every CUDA build
    memory_per_chip={"A100": 80 * GiB, "H100": 80 * GiB, "H200": 141 * 10**9, "B200": 180 * 10**9, "MI300X": 192 * GiB},
    fallback="never",  # an op without a CUDA kernel raises; nothing runs on the CPU silently
    compile_backends=("inductor",),
    runs_cuda_calls=True,
    dist_backend=DIST_BACKEND,
    lacking_reduce_ops=frozenset(),  # NCCL has every ReduceOp; checked against the collectives shim at load
    sources=("NVIDIA and AMD datasheets (memory per GPU)",),
)
"""What ``anydevice check`` reads for CUDA GPUs (eager, dynamic shapes; every torch op has a CUDA kernel)."""

# Dense bf16 TFLOP/s per chip (vendor datasheets; the sparse figures are twice these). A chip not
# listed has no peak: MFU is reported as unknown, never guessed from a neighbour.
PEAK_BF16_TFLOPS = {
    "H100": 989.4,  # NVIDIA H100 SXM datasheet
    "H100 PCIe": 756.5,  # NVIDIA H100 PCIe datasheet (1513 sparse)
    "H200": 989.4,  # NVIDIA H200 datasheet (same compute as H100 SXM)
    "B200": 2250.0,  # NVIDIA HGX B200 datasheet
    "GB200": 2500.0,  # NVIDIA GB200 NVL72 datasheet, per GPU
    "A100": 312.0,  # NVIDIA A100 datasheet
    "MI300X": 1307.4,  # AMD Instinct MI300X datasheet
}
# (substring of the upper-cased name without spaces or dashes, chip) - most specific first
_NAME_PATTERNS = (
    ("H100PCIE", "H100 PCIe"),
    ("H100NVL", "H100 NVL"),  # no peak in the table: its datasheet figure differs from SXM's
    ("GB200", "GB200"),
    ("B200", "B200"),
    ("H200", "H200"),
    ("H100", "H100"),
    ("A100", "A100"),
    ("MI300X", "MI300X"),
)
CUDA_VISIBLE_DEVICES = Setting(
    "CUDA_VISIBLE_DEVICES",
    'Which NVIDIA/AMD GPUs the process sees; `""`, `-1`, `none` or `NoDevFiles` hides every GPU. `anydevice doctor` reports it.',
    owner="CUDA",
)
INSTALL_CUDA_TORCH = "install a CUDA (or ROCm) build of torch: pip install torch (Linux x86-64 wheels on PyPI include CUDA)"


def chip_from_name(name: str) -> str:
    """The chip key for a device name (``NVIDIA H100 80GB HBM3`` -> ``H100``), or the name itself."""
    flat = name.upper().replace(" ", "").replace("-", "")
    return next((chip for pattern, chip in _NAME_PATTERNS if pattern in flat), name)


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
            chips={name: Chip(label=name) for name in ("h200", "h100", "b200", "a100", "l40s", "l4")},
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
