"""The mps plugin: Apple-silicon GPUs through Metal."""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import TYPE_CHECKING

from anydevice.plugin import ALL_DTYPES, CheckFacts, Detection, DeviceSpec, Evidence, Launch, Serving, Shims, hookimpl

DIST_BACKEND = "gloo"
"""The process-group backend (MPS has none of its own), declared once: the collectives table and CHECK_FACTS read it."""
CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES - {"float64", "complex128"},  # MPS has no float64
    fallback="warnings",  # with PYTORCH_ENABLE_MPS_FALLBACK=1 torch warns for each op it runs on the CPU
    fallback_warning=r"fall back to run on the CPU",
    compile_backends=("inductor",),
    dist_backend=DIST_BACKEND,
    sources=("torch's MPS backend",),
)
"""What ``anydevice check`` and strict mode read for Apple GPUs."""

if TYPE_CHECKING:
    import torch


def detect() -> Detection:
    if platform.system() != "Darwin" or platform.machine() != "arm64":
        return Detection.missing(
            f"MPS needs macOS on Apple silicon (this is {platform.system()} {platform.machine()})",
            "run on a Mac with an M-series chip",
            "unsupported_platform",
        )
    import torch

    if not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        return Detection.missing(
            "torch reports MPS unavailable" + ("" if built else " (this torch build has no MPS support)"),
            "use macOS 12.3+ and the standard torch wheel for macOS arm64",
            "no_hardware" if built else "package_missing",
        )
    return Detection.ok("Apple-silicon GPU available through Metal", count=1, chip=platform.processor() or "Apple silicon")


def _autocast_dtype() -> torch.dtype:
    import torch

    return torch.float16


def _memory(index: int) -> dict[str, int]:
    import torch

    return {
        "allocated_bytes": int(torch.mps.current_allocated_memory()),
        "reserved_bytes": int(torch.mps.driver_allocated_memory()),
    }


def load() -> Shims:
    from anydevice.plugin import CollectivesTable, CompileTable, EagerVendor, PlacementTable, ProfilingTable, eager_shims

    return eager_shims(
        EagerVendor(
            "mps",
            placement=PlacementTable(autocast_dtype=_autocast_dtype, memory_stats=_memory),
            compile=CompileTable(inductor=True),
            collectives=CollectivesTable(backend=DIST_BACKEND, fsdp=False),
            profiling=ProfilingTable(activities=("MPS",)),  # skipped where this torch's profiler lacks it
        )
    )


SERVING = {
    "vllm": Serving(plugins=("metal",), hint="pip install vllm-metal (the Apple-silicon vLLM platform plugin)"),
    "sglang": Serving(platforms=("mps",), hint="pip install sglang (its MPS platform is built in)"),
}
"""What serving engines run here (anydevice.integrations): the vllm-metal plugin, SGLang's MPS platform."""


EVIDENCE = Evidence.declared("torch's MPS backend docs; never run on Apple silicon in this project", "2026-12-03")
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="mps",
            aliases=("metal",),
            detect=detect,
            load=load,
            priority=60,
            launch=Launch(launcher="single-process"),  # one process drives the GPU
            # the vendor table above says fsdp=False: wrap(model, "fsdp") raises UnsupportedFeatureError
            unsupported={"fsdp_step": "FSDP2 is not offered on mps (the eager table sets fsdp=False); use wrap(model, 'ddp')."},
            serving=SERVING,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )
