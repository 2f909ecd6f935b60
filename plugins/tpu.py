"""The tpu plugin: Google TPUs through TorchTPU (``torch_tpu``) first, torch_xla second.

Detection reads the PCI bus and ``/dev/vfio`` (what ``torch_tpu._internal.utils.hardware``
checks) and imports neither package. TorchTPU is imported only when tpu is selected: the CLI
and ``anydevice run`` turn torch's backend autoload off for every other selection, so
:func:`load_torch_tpu` registers the device explicitly.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from anydevice.errors import DeviceUnavailableError
from anydevice.plugin import (
    FP8,
    NO_DOUBLE,
    CheckFacts,
    Detection,
    DeviceSpec,
    Evidence,
    Hardware,
    Launch,
    ModelServer,
    Serving,
    Shims,
    XlaVendor,
    hookimpl,
    lazy_xla,
    settings,
    tpu_compiler,
    tpu_slices,
    versions,
)
from anydevice.plugin import chips as catalogue
from anydevice.plugin import detection as d

GOOGLE_PCI_VENDOR = "0x1ae0"
DOCS, CHIPS = tpu_slices.DOCS, tpu_slices.CHIPS
"""The TPU generations, each fact once (``anydevice.shims.tpu_slices``, which the slice compiler reads too)."""
TPU_DEVICE_IDS = {pci: c.model.removeprefix("TPU ") for c in CHIPS for pci in c.pci_ids}
"""PCI device id -> the generation detection reports (``TPU v7``), read from :data:`CHIPS`."""
PEAK_BF16_TFLOPS = catalogue.peaks_tflops(CHIPS)
"""Dense bf16 TFLOP/s per chip by model (``TPU v5e``), read from :data:`CHIPS` (torch_tpu carries the same table)."""
INSTALL = "pip install torch_tpu (on a Cloud TPU VM; needs torch 2.11 to 2.15), or pip install torch_xla[tpu]"
INSTALL_AFTER_XLA = (
    f"pip install torch_tpu (on a Cloud TPU VM; needs torch 2.11 to 2.15); torch_xla[tpu], the other TPU stack, "
    f"ends at torch {lazy_xla.LAST_TORCH[0]}.{lazy_xla.LAST_TORCH[1]}"
)
NO_CHIP_FIX = "run on a Cloud TPU VM (PCI vendor 0x1ae0 with /dev/vfio)"
XPROF = "TensorBoard with the profile plugin, or XProf (open the run directory's .xplane.pb)"
PAIRED_PACKAGES: dict[str, versions.PairRule] = {"torch_tpu": "requires_dist", "torch_xla": "lockstep"}
SLICE_SIZES = {c.model.removeprefix("TPU "): c.host_processes for c in CHIPS if c.host_processes}
"""Processes per host that form a whole slice, per generation (torch_tpu 0.2's hardware tables); a
sub-slice world never completes PJRT's start-session barrier. Declared once, in :data:`CHIPS`:
``Hardware.process_counts`` and ``CheckFacts.world_sizes`` (keyed by model, ``TPU v4``) are both read from it."""
COMPILE_BACKENDS = ("tpu", "openxla")
"""``torch.compile`` backends: TorchTPU's own, then torch_xla's (the fallback stack); TorchTPU's shim uses the first."""
COMPILE_CACHES = {"TORCH_TPU_TIER2_COMPILATION_CACHE": "tier2", "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT": "tier3"}
"""torch_tpu 0.2's persistent compile caches (variable -> directory under ANYDEVICE_CACHE_DIR/tpu)."""
CHECK_FACTS = CheckFacts(
    dtypes=NO_DOUBLE | FP8,  # no float64/complex on the MXU path; fp8 storage types exist (torch_tpu, [doc])
    static_shapes=True,  # torch_tpu compiles with dynamic=False by default; torch_xla traces static shapes
    memory_per_chip=catalogue.memory_per_chip(CHIPS),  # HBM per chip, from the catalogue
    # torch_tpu/_internal/utils/hardware.py lists whole slices only; any other count never passes its start barrier
    world_sizes=catalogue.host_processes(CHIPS),
    slice_compiler=tpu_compiler.compiler,  # --target tpu:<slice>: libtpu's compiler on this host (the tpu-check extra)
    fallback="warnings",
    fallback_warning=r"<TorchTpu/Performance/",  # torch_tpu/_internal/warnings.py prefixes its fallback warnings
    compile_backends=COMPILE_BACKENDS,
    sources=(f"{DOCS} (HBM per chip)", tpu_slices.TORCH_TPU),
)
"""What ``anydevice check`` and ``ad.capabilities()`` read for TPUs (no TPU op table is shipped: ops are not verified)."""


def tpu_chips(pci_root: str = "/sys/bus/pci/devices", vfio_root: str = "/dev/vfio") -> list[str]:
    """Generations of the TPU chips on the PCI bus that have a VFIO node (what torch_tpu checks)."""
    chips = []
    for address, device_id in d.pci_devices(GOOGLE_PCI_VENDOR, pci_root):
        chip = catalogue.chip_of_pci(CHIPS, device_id)
        if chip is not None and d.iommu_group_has_vfio(Path(pci_root) / address, vfio_root):
            chips.append(chip.model.removeprefix("TPU "))
    return chips


def classify(
    native: bool, xla: bool, chips: list[str], pair: versions.PairCheck | None = None, torch: str | None = None
) -> Detection:
    """The detection verdict from what is installed and which chips were found (no I/O).

    ``torch`` is the installed torch's version: after torch_xla's end the fix names TorchTPU only.
    """
    install = INSTALL_AFTER_XLA if lazy_xla.torch_xla_ended(torch) else INSTALL
    if not chips and not (native or xla):
        return Detection.missing(
            "TorchTPU (torch_tpu) is not installed and no TPU chip was found", install, "package_and_hardware_missing"
        )
    if not chips:
        which = "TorchTPU" if native else "torch_xla"
        return Detection.missing(f"{which} installed, no TPU chip found", NO_CHIP_FIX, "no_hardware")
    if not (native or xla):
        return Detection.missing(
            f"TPU {chips[0]} chip found but neither torch_tpu nor torch_xla is installed", install, "hardware_without_package"
        )
    if pair is not None and not pair.ok:
        return Detection.missing(pair.reason, pair.fix, "version_mismatch")
    stack = "TorchTPU" if native else "torch_xla (PJRT_DEVICE=TPU)"
    return Detection.ok(f"{len(chips)} TPU {chips[0]} chip(s); using {stack}", count=len(chips), chip=f"TPU {chips[0]}")


def detect() -> Detection:
    native, xla = d.installed("torch_tpu"), d.installed("torch_xla")
    package = "torch_tpu" if native else "torch_xla"
    pair = versions.check_pair(package, PAIRED_PACKAGES[package]) if (native or xla) else None
    return classify(native, xla, tpu_chips(), pair, d.torch_version())


def prepare_environment() -> None:
    """Before the vendor is imported: TorchTPU's compile caches under ``ANYDEVICE_CACHE_DIR``; or, for the
    torch_xla fallback, PJRT_DEVICE=TPU (a conflicting value is an error)."""
    if d.installed("torch_tpu"):
        set_compile_caches()
    else:
        lazy_xla.prepare_environment(xla_vendor())


def set_compile_caches() -> dict[str, str]:
    """Point each of torch_tpu's persistent compile caches (:data:`COMPILE_CACHES`) that the user left unset
    at ``ANYDEVICE_CACHE_DIR/tpu/<tier>``; returns what was set."""
    chosen = {}
    for variable, tier in COMPILE_CACHES.items():
        if not os.environ.get(variable):
            chosen[variable] = os.environ[variable] = str(settings.writable_cache_dir("tpu", tier))
    return chosen


def slice_sizes() -> tuple[int, ...]:
    """The whole-slice process counts of this host's TPU generation (empty: no chip, or a generation not tabled)."""
    chips = tpu_chips()
    return SLICE_SIZES.get(chips[0], ()) if chips else ()


def load_torch_tpu() -> ModuleType:
    """Import TorchTPU and register the ``tpu`` device; needed when torch's autoload is off. Idempotent."""
    import torch  # noqa: F401  first: torch's backend autoload may import torch_tpu itself
    import torch_tpu
    import torch_tpu._loader

    torch_tpu._loader.load()  # registers PrivateUse1 'tpu', the 'tpu' dist backend and patches (with a chip)
    module: ModuleType = torch_tpu
    return module


def _chip() -> str | None:
    chips = tpu_chips()
    return f"TPU {chips[0]}" if chips else None


def _profiler_config(directory: Path) -> Any:
    from anydevice.plugin import rank

    config = _torch_tpu_module().profiler.TpuProfilerConfig
    return config(run_dir=str(directory), worker_rank=str(rank()))


def _torch_tpu_module() -> Any:
    """``torch.tpu``, which TorchTPU registers (torch's stubs do not know it)."""
    from anydevice.plugin import torch_device_module

    module = torch_device_module("tpu")
    if module is None:
        raise DeviceUnavailableError("tpu", "TorchTPU registered no torch.tpu module", NO_CHIP_FIX, problem="no_hardware")
    return module


@functools.cache
def _tpu_launch_env(local_world_size: int) -> dict[str, str]:
    """What ``set_tpu_launch_env`` adds to the parent's environment (it never overwrites; called once)."""
    before = dict(os.environ)
    _torch_tpu_module().distributed.set_tpu_launch_env(nproc_per_node=local_world_size)
    return {k: v for k, v in os.environ.items() if before.get(k) != v}


def _launcher() -> str:
    """TorchTPU: ``set_tpu_launch_env`` in the parent (:func:`_launch_env`), then spawn (fork raises); torch_xla: torchrun."""
    return "spawn" if d.installed("torch_tpu") else "torchrun"


def _launch_env(local_rank: int, local_world_size: int) -> dict[str, str]:
    if not d.installed("torch_tpu"):
        return {}
    load_torch_tpu()
    return _tpu_launch_env(local_world_size)


def _versions() -> dict[str, str]:
    return {p: v for p in ("torch_tpu", "libtpu") if (v := d.version_of(p))}


def _load_native() -> Shims:
    load_torch_tpu()
    import torch

    from anydevice.plugin import CollectivesTable, CompileTable, EagerVendor, ProfilingTable, eager_shims

    accel = torch.accelerator.current_accelerator()  # torch.tpu.is_available() etc. raise by design
    if accel is None or accel.type != "tpu":
        raise DeviceUnavailableError(
            "tpu", "TorchTPU loaded but registered no TPU device (no TPU chip found)", NO_CHIP_FIX, problem="no_hardware"
        )
    return eager_shims(
        EagerVendor(
            "tpu",
            # torch_tpu rejects inductor on TPU inputs; its own persistent caches (COMPILE_CACHES) are set by prepare_environment
            compile=CompileTable(backend=COMPILE_BACKENDS[0]),
            collectives=CollectivesTable(backend="tpu"),
            profiling=ProfilingTable(config=_profiler_config, viewer=XPROF, chip=_chip, peak_tflops=PEAK_BF16_TFLOPS),
            versions=_versions,
        )
    )


def xla_vendor() -> XlaVendor:
    """The torch_xla fallback's table for the shared lazy-XLA shims."""
    lockstep = tuple(p for p, rule in PAIRED_PACKAGES.items() if rule == "lockstep")  # declared once, in PAIRED_PACKAGES
    return XlaVendor(
        name="tpu", pjrt_device="TPU", chip=_chip, peak_tflops=PEAK_BF16_TFLOPS, lockstep=lockstep, versions=_versions
    )


def load() -> Shims:
    return _load_native() if d.installed("torch_tpu") else lazy_xla.xla_shims(xla_vendor())


def libtpu_present() -> str | None:
    """Why a serving environment can drive the TPU without TorchTPU or torch_xla: libtpu installed (vLLM's TPU stacks)."""
    version = d.version_of("libtpu")
    return f"libtpu {version} is installed (a TPU serving environment)" if version else None


MODEL_SERVER = ModelServer(
    image="docker.io/vllm/vllm-tpu:v0.18.0",
    resource="google.com/tpu",
    connector={
        "kv_connector": "TPUConnector",
        "kv_connector_module_path": "tpu_inference.distributed.tpu_connector",
        "kv_ip": "$(POD_IP)",
    },
    kv_role="kv_both",
    env={"TPU_SIDE_CHANNEL_PORT": "9600", "TPU_KV_TRANSFER_PORT": "9100"},
    labels={"llm-d.ai/accelerator-vendor": "google"},
    source="llm-d v0.9.0 guides/pd-disaggregation/modelserver/tpu (v6 overlay and tpu/base; TP per chip: the chips catalogue)",
)
"""llm-d's TPU model server (tpu-inference on JAX, vLLM's built-in TPU platform), as its P/D guide's overlay writes it."""


def serving(torch_tpu: bool | None = None) -> dict[str, Serving]:
    """What serving engines run here (anydevice.integrations), by what is installed (``torch_tpu``: found on sys.path).

    vLLM: the PyTorch-native ``vllm-torchtpu`` platform plugin (entry point ``torchtpu``) first where
    TorchTPU is installed (it registers without a hardware check, so it is never asked without it),
    else vLLM's built-in TPU platform (tpu-inference, on JAX). ``ANYDEVICE=tpu`` resolves for serving
    where only libtpu is installed; ``tpu:N`` sets ``TPU_VISIBLE_CHIPS=N`` for the engine.
    """
    native = d.installed("torch_tpu") if torch_tpu is None else torch_tpu
    return {
        "vllm": Serving(
            platforms=("tpu",),
            plugins=("torchtpu",) if native else (),
            plugins_first=native,
            hint="pip install vllm-torchtpu (vLLM on TorchTPU), or vllm-tpu (tpu-inference, on JAX)",
            builds=("vllm-tpu",),
            available=libtpu_present,
            visible_devices="TPU_VISIBLE_CHIPS",
            model_server=MODEL_SERVER,
        ),
        "sglang": Serving(
            hint="SGLang's TPU routes are separate projects (sglang-jax; SGLang-TorchTPU) with their own servers; "
            "SGLang itself has no TPU platform"
        ),
    }


EVIDENCE = Evidence.declared(
    "torch_tpu 0.2.0 sources and Google Cloud TPU docs; never run on a TPU in this project", "2026-12-03"
)
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="tpu",
            detect=detect,
            load=load,
            priority=90,
            vendor_package="torch_tpu",
            autoload_module="torch_tpu",
            prepare_environment=prepare_environment,
            vendor_modules=("torch_tpu", "torch_xla"),
            paired_packages=PAIRED_PACKAGES,
            settings=(lazy_xla.PJRT_DEVICE,),  # the torch_xla fallback's runtime
            hardware=Hardware(
                pjrt_names=("TPU",), scan=tpu_chips, ray_resource="TPU", process_counts=slice_sizes, exclusive=True
            ),
            launch=Launch(launcher=_launcher, env=_launch_env),
            serving=serving(),
            chips=CHIPS,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )
