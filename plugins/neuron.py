"""The neuron plugin: AWS Trainium through torch-neuronx. Not verified on hardware.

Two stacks share the package name, so the plugin branches on its version (read from metadata,
before importing it): releases for torch 2.10 and later (2.13.3, 2.14.3) are native TorchNeuron
(PrivateUse1 device ``neuron``, ``torch.compile(backend="neuron")``, process-group backend
``neuron``); the releases for torch 2.9 and older are XLA-based (``PJRT_DEVICE=NEURON`` and the
shared XLA shims). Tested only against the fake in ``tests/support/fake_torch_neuronx``: every
result is marked "not verified on hardware".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice.plugin import (
    FP8,
    NO_DOUBLE,
    CheckFacts,
    Chip,
    Detection,
    DeviceSpec,
    Evidence,
    GiB,
    Hardware,
    Launch,
    ModelServer,
    Serving,
    Setting,
    Shims,
    XlaVendor,
    hookimpl,
    lazy_xla,
    settings,
    versions,
)
from anydevice.plugin import chips as catalogue
from anydevice.plugin import detection as d

PJRT_DEVICE = lazy_xla.PJRT_DEVICE

if TYPE_CHECKING:
    from anydevice.plugin import Check, DoctorContext

DISTRIBUTION = "torch-neuronx"
NATIVE_SINCE = (2, 10)
"""torch-neuronx for torch 2.10+ is native TorchNeuron (released: 2.13.3, 2.14.3); 2.9.0.2.x is the last XLA-based one."""
INSTALL = "pip install torch-neuronx from AWS's Neuron index (https://pip.repos.neuron.amazonaws.com) on a Trn/Inf instance"
INSTALL_AFTER_XLA = (
    "pip install torch-neuronx (native TorchNeuron, for torch 2.13 or 2.14) from AWS's Neuron index "
    "(https://pip.repos.neuron.amazonaws.com) on a Trn2/Trn3 instance; the XLA-based torch-neuronx ends at torch "
    f"{lazy_xla.LAST_TORCH[0]}.{lazy_xla.LAST_TORCH[1]}"
)
NO_DEVICE_FIX = "run on a Trainium (trn1/trn2/trn3) or Inferentia instance with the Neuron driver (/dev/neuron*)"
NAME = "neuron"
NODE_GLOB = "/dev/neuron[0-9]*"
AWS = "AWS Neuron docs (architecture: trainium, trainium2, trainium3, inferentia2 pages)"
CHIPS = (
    Chip(
        "trn1",
        "Trainium1",
        AWS,
        "2026-12-07",
        aliases=("trn1n", "trainium1"),
        cores=2,
        devices=2,
        hbm_bytes=32 * GiB,
        hbm_bandwidth=820e9,
        peak_bf16=190e12,
        shapes=catalogue.host_shapes(*range(1, 17)),
        llmd_label="trn1",
    ),
    Chip(
        "trn2",
        "Trainium2",
        AWS + "; 4 logical NeuronCores per chip at the default LNC=2",
        "2026-12-07",
        aliases=("trn2u", "trainium2"),
        cores=8,
        devices=4,
        hbm_bytes=96 * GiB,
        hbm_bandwidth=2.9e12,
        peak_bf16=667e12,
        peak_fp8=1299e12,
        shapes=catalogue.host_shapes(*range(1, 17)),
        llmd_label="trn2",
    ),
    Chip(
        "trn3",
        "Trainium3",
        AWS + " (cores per chip not declared here)",
        "2026-12-07",
        aliases=("trainium3",),
        hbm_bytes=144 * GiB,
        hbm_bandwidth=4.9e12,
        peak_bf16=671e12,
    ),
    Chip(
        "inf2",
        "Inferentia2",
        AWS,
        "2026-12-07",
        aliases=("inferentia2",),
        cores=2,
        devices=2,
        hbm_bytes=32 * GiB,
        hbm_bandwidth=820e9,
        peak_bf16=190e12,
        shapes=catalogue.host_shapes(*range(1, 13)),
    ),
)
"""The Neuron chips, each fact once; the EC2 instance family (``trn2`` of ``trn2.48xlarge``) is a chip's name or
alias (:func:`chip`). An instance type not listed leaves the chip, so MFU, unknown."""
PEAK_BF16_TFLOPS = catalogue.peaks_tflops(CHIPS)
"""Dense bf16 TFLOP/s per chip, read from :data:`CHIPS`."""
CHECK_FACTS = CheckFacts(
    dtypes=NO_DOUBLE | FP8,  # Trainium has no float64/complex engines; fp8 on Trainium2 and later ([doc])
    static_shapes=True,  # torch.compile(backend="neuron") rejects dynamic=True: each shape is a compile
    memory_per_chip=catalogue.memory_per_chip(CHIPS),  # HBM per chip, from the catalogue
    fallback="unknown",  # TorchNeuron falls back to the CPU for some ops; no documented switch or counter to notice it
    strict_refusal=(
        "TorchNeuron runs the ops it has no Neuron kernel for on the CPU (its operator table marks them CPU_FALLBACK). "
        "AWS's docs say that fallback can be disabled, but name no switch in anydevice's sources, and the API this "
        "plugin is built and tested against (torch.neuron device calls, torch_neuronx.memory_stats, the neuron compile "
        "and process-group backends, the NeuronConfig profiler) offers none, nor a count of fallbacks to read after a "
        "step; anydevice does not guess a variable name.",
        "Before a run: `anydevice check SCRIPT --target neuron` lists the script's ops, and AWS's 'Supported PyTorch "
        "APIs and operators' table marks the CPU_FALLBACK ones; on Trainium, a torch.profiler trace with "
        "activities=[CPU, PrivateUse1] shows which ops ran on the CPU.",
    ),
    compile_backends=("neuron", "openxla"),  # TorchNeuron's backend; the XLA-based releases (torch <= 2.9) compile with openxla
    sources=("AWS Neuron docs (HBM per chip; torch.compile reference 2026-10-14)",),
)
"""What ``anydevice check`` reads for Trainium (the TorchNeuron op table is not shipped: ops are not verified)."""
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"
"""On EC2 (Nitro) the DMI product name is the instance type, e.g. ``trn1.32xlarge``."""
NEURON_CORES = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
NEURON_RT_VISIBLE_CORES = Setting(
    "NEURON_RT_VISIBLE_CORES",
    "Which NeuronCores the Neuron runtime uses (`0`, `0-3`, `0,2`); launchers set it per rank. "
    "`anydevice doctor` checks its syntax and that it agrees with NEURON_RT_NUM_CORES.",
    owner="Neuron runtime",
)
NEURON_RT_NUM_CORES = Setting(
    "NEURON_RT_NUM_CORES",
    "How many NeuronCores the Neuron runtime takes; must match NEURON_RT_VISIBLE_CORES when both are set.",
    owner="Neuron runtime",
)
TORCH_NEURONX_NEFF_CACHE_DIR = Setting(
    "TORCH_NEURONX_NEFF_CACHE_DIR",
    "Where native TorchNeuron (torch-neuronx 2.13+) caches compiled NEFFs; anydevice sets it under "
    "ANYDEVICE_CACHE_DIR (`neuron-neff/`) when unset.",
    owner="torch-neuronx",
)
NEURON_CC_FLAGS = Setting(
    "NEURON_CC_FLAGS",
    "Flags for neuronx-cc on XLA-based torch-neuronx (2.9 and older); anydevice appends `--cache_dir=` under "
    "ANYDEVICE_CACHE_DIR (`neuron-cc/`) unless the flags already name one.",
    owner="torch-neuronx",
)
NEURON_SETTINGS = (NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES, TORCH_NEURONX_NEFF_CACHE_DIR, NEURON_CC_FLAGS, PJRT_DEVICE)
"""Every variable the device reads (``PJRT_DEVICE``: the XLA-based releases' runtime)."""
PERFETTO_NTFF = "Neuron Explorer, or Perfetto for the trace.json (device traces are .ntff)"


def is_native(version: str) -> bool:
    """True for native TorchNeuron (torch-neuronx >= 2.10: 2.13.x, 2.14.x), False for the XLA-based releases (<= 2.9)."""
    return d.major_minor(version) >= NATIVE_SINCE


def stack(version: str) -> str:
    """A label for ``anydevice list`` and ``info``."""
    return "native TorchNeuron" if is_native(version) else "XLA-based torch-neuronx (PJRT_DEVICE=NEURON)"


def chip(product_path: str = DMI_PRODUCT) -> str | None:
    """The Trainium generation from the EC2 instance type (``trn2.48xlarge`` -> ``Trainium2``), or None."""
    try:
        product = Path(product_path).read_text().strip().lower()
    except OSError:
        return None
    found = catalogue.chip_named(CHIPS, product.split(".", 1)[0])
    return found.model if found is not None else None


def neuron_devices() -> list[str]:
    """The Neuron device nodes (``/dev/neuron0`` ...), found without importing anything."""
    return d.device_files(NODE_GLOB)


def classify(
    version: str | None, devices: list[str], pair: versions.PairCheck | None = None, torch: str | None = None
) -> Detection:
    """The detection verdict from the installed version and the Neuron device nodes (no I/O).

    ``torch`` is the installed torch's version: after torch_xla's end the fix names native TorchNeuron.
    """
    install = INSTALL_AFTER_XLA if lazy_xla.torch_xla_ended(torch) else INSTALL
    if version is None and not devices:
        return Detection.missing(
            "torch-neuronx is not installed and no Neuron device was found", install, "package_and_hardware_missing"
        )
    if version is None:
        return Detection.missing(
            f"{len(devices)} Neuron device(s) found but torch-neuronx is not installed", install, "hardware_without_package"
        )
    if not devices:
        return Detection.missing(
            f"torch-neuronx {version} ({stack(version)}) installed, no Neuron device found (/dev/neuron*)",
            NO_DEVICE_FIX,
            "no_hardware",
        )
    if pair is not None and not pair.ok:
        return Detection.missing(pair.reason, pair.fix, "version_mismatch")
    return Detection.ok(
        f"{len(devices)} Neuron device(s); torch-neuronx {version}, {stack(version)}",
        count=len(devices),
        chip=chip(),
        stack=stack(version),
    )


def pair_rule(version: str | None) -> versions.PairRule:
    """Native TorchNeuron declares its torch range; the XLA-based releases are in lockstep with torch."""
    return "requires_dist" if version is not None and is_native(version) else "lockstep"


PAIRED_PACKAGES: dict[str, versions.PairRule | Callable[[str], versions.PairRule]] = {
    DISTRIBUTION: pair_rule,
    "torch_xla": "lockstep",
}
"""Distributions whose version must pair with torch's (``DeviceSpec.paired_packages``); the XLA-based path's
lockstep packages (``XlaVendor.lockstep``) are read from it."""


def _pair(version: str | None) -> versions.PairCheck | None:
    if version is None:
        return None
    return versions.check_pair(DISTRIBUTION, pair_rule(version))


def detect() -> Detection:
    version = d.version_of(DISTRIBUTION)
    return classify(version, neuron_devices(), _pair(version), d.torch_version())


def rank_cores(local_rank: int) -> dict[str, str]:
    """One logical NeuronCore per rank: without these every rank grabs all cores."""
    return {NEURON_RT_VISIBLE_CORES.name: str(local_rank), NEURON_RT_NUM_CORES.name: "1"}


def prepare_environment() -> None:
    """Variables the Neuron runtime and compiler read at import; values the user set win."""
    version = d.version_of(DISTRIBUTION)
    env: dict[str, str] = {}
    local_rank, world = settings.LOCAL_RANK.get(), settings.LOCAL_WORLD_SIZE.get() or settings.WORLD_SIZE.get()
    if local_rank is not None and world is not None and int(world) > 1:  # launched by torchrun, not by us
        env.update(rank_cores(int(local_rank)))
    if version is not None and is_native(version):
        env[TORCH_NEURONX_NEFF_CACHE_DIR.name] = str(settings.cache_dir("neuron-neff"))
    else:
        lazy_xla.prepare_environment(xla_vendor())  # PJRT_DEVICE=NEURON, or an error if it names another runtime
        flags = NEURON_CC_FLAGS.get() or ""
        if "--cache_dir" not in flags:  # keep the user's flags, add the cache
            os.environ[NEURON_CC_FLAGS.name] = f"{flags} --cache_dir={settings.cache_dir('neuron-cc')}".strip()
    for name, value in env.items():
        os.environ.setdefault(name, value)


def _launch_env(local_rank: int, local_world_size: int) -> Mapping[str, str]:
    return rank_cores(local_rank)


LAUNCH = Launch(env=_launch_env)
"""One NeuronCore per rank, on both the native and the XLA path (``anydevice run`` reads it without the shims)."""


def _memory(index: int) -> dict[str, int]:
    import torch_neuronx

    stats: Mapping[str, Any] = torch_neuronx.memory_stats()
    return {k: int(v) for k, v in stats.items() if isinstance(v, (int, float))}


def _profiler_config(directory: Path) -> Any:
    from torch_neuronx.profiling import NeuronConfig

    return NeuronConfig()  # output location: Neuron's default (the docs excerpt did not show a directory option)


def _versions() -> dict[str, str]:
    return {"torch-neuronx": d.version_of(DISTRIBUTION) or "unknown", "neuronx-cc": d.version_of("neuronx-cc") or "unknown"}


def _load_native() -> Shims:
    import torch  # noqa: F401  first: torch's backend autoload may import torch_neuronx itself
    import torch_neuronx  # noqa: F401  registers the 'neuron' device, dist backend and compile backend

    from anydevice.plugin import CollectivesTable, CompileTable, EagerVendor, PlacementTable, ProfilingTable, eager_shims

    return eager_shims(
        EagerVendor(
            "neuron",
            # the documented calls: torch.neuron.synchronize(), device_count()
            # pinned host memory is not documented for TorchNeuron (and the fake has no PrivateUse1 pinned allocator):
            # declared absent until a run on hardware shows it, so cuda-compat's DataLoader(pin_memory=True) does not pin
            placement=PlacementTable(device_module_first=True, memory_stats=_memory, pinned_memory=False),
            # dynamic=True is rejected by the neuron backend
            compile=CompileTable(backend="neuron", defaults={"dynamic": False}, cache_env=TORCH_NEURONX_NEFF_CACHE_DIR.name),
            collectives=CollectivesTable(backend="neuron"),
            profiling=ProfilingTable(
                activities=("PrivateUse1",),
                config=_profiler_config,
                viewer=PERFETTO_NTFF,
                chip=chip,
                peak_tflops=PEAK_BF16_TFLOPS,
            ),
            versions=_versions,
        )
    )


def xla_vendor() -> XlaVendor:
    """The XLA-based path's table for the shared lazy-XLA shims."""
    return XlaVendor(
        name=NAME,
        pjrt_device="NEURON",
        chip=chip,
        peak_tflops=PEAK_BF16_TFLOPS,
        persistent_cache=False,  # neuronx-cc keeps its own NEFF cache (NEURON_CC_FLAGS --cache_dir)
        lockstep=tuple(PAIRED_PACKAGES),  # declared once: on this path pair_rule makes every paired package lockstep
        versions=_versions,
        spmd_refusal="The XLA-based torch-neuronx (torch <= 2.9) shards models with NeuronX Distributed "
        "(neuronx_distributed.parallel_layers); use it, or TorchNeuron (torch-neuronx for torch >= 2.10), where "
        "ad.distributed.parallelize lowers to DTensor.",
    )


def load() -> Shims:
    version = d.version_of(DISTRIBUTION)
    return _load_native() if version is not None and is_native(version) else lazy_xla.xla_shims(xla_vendor())


SERVING = {
    "vllm": Serving(
        plugins=("neuron", "optimum_neuron"),
        hint="pip install vllm-neuron (AWS Neuron's vLLM platform plugin)",
        model_server=ModelServer(
            image=None,  # llm-d publishes no Neuron image
            resource="aws.amazon.com/neuron",
            connector={"kv_connector": "NixlConnector", "kv_buffer_device": "cpu"},
            host_staged=True,
            env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "$(POD_IP)"},
            labels={"llm-d.ai/accelerator-vendor": "aws"},
            source="declared: Trainium is not in llm-d's accelerator list; NixlConnector host-staged (kv_buffer_device: cpu) "
            "as vLLM PR #28356 runs it; trn2 counts 4 logical NeuronCores per chip (the default LNC=2)",
        ),
    ),
    "sglang": Serving(hint="SGLang has no Neuron platform"),
}
"""What serving engines run here (anydevice.integrations): AWS's vLLM platform plugin."""


EVIDENCE = Evidence.stand_in(
    "the torch-neuronx fake (tests/support/fake_torch_neuronx; compat_matrix/results/neuron-fake.json)",
    "2026-12-02",
    simulated=True,
)
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name=NAME,
            aliases=("trainium", "inferentia"),
            detect=detect,
            load=load,
            prepare_environment=prepare_environment,
            priority=85,
            vendor_package=DISTRIBUTION,
            autoload_module="torch_neuronx",
            vendor_modules=("torch_neuronx", "torch_xla"),
            paired_packages=PAIRED_PACKAGES,
            settings=NEURON_SETTINGS,
            hardware=Hardware(pjrt_names=("NEURON",), scan=neuron_devices, ray_resource="neuron_cores", exclusive=True),
            launch=LAUNCH,
            serving=SERVING,
            chips=CHIPS,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )


@hookimpl
def anydevice_doctor_checks(context: DoctorContext) -> list[Check]:
    """``NEURON_RT_VISIBLE_CORES``: a core list (``0``, ``0-3``, ``0,2``) that agrees with ``NEURON_RT_NUM_CORES``."""
    from anydevice.plugin import Check

    value = NEURON_RT_VISIBLE_CORES.get()
    if value is None:
        return []
    name = NEURON_RT_VISIBLE_CORES.name
    if not NEURON_CORES.match(value.replace(" ", "")):
        return [Check(name, "fail", f"{name}={value!r} is not a core list", f"write cores as 0, 0-3 or 0,2 (e.g. {name}=0-1)")]
    count = 0
    for part in value.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            return [Check(name, "fail", f"{name}={value!r}: the range {part} runs backwards", f"write it as {high}-{low}")]
        count += int(high) - int(low) + 1 if high else 1
    num_name, num = NEURON_RT_NUM_CORES.name, NEURON_RT_NUM_CORES.get()
    if num is not None and num != str(count):
        fix = f"unset {num_name}, or set {num_name}={count}"
        return [Check(name, "fail", f"{name}={value} names {count} core(s) but {num_name}={num}", fix)]
    scope = "" if context.concerns(NAME) else f" (applies only when {NAME} is selected)"
    return [Check(name, "ok", f"{name}={value}: {count} NeuronCore(s){scope}")]
