"""One implementation of the four shims for lazy XLA devices (torch_xla on any PJRT device).

Every plugin that runs on torch_xla (``xla``, ``tpu``'s torch_xla fallback, ``neuron`` before
torch-neuronx 2.14) describes its device with an :class:`XlaVendor` table and calls, in order:

1. :func:`prepare_environment` (from its ``DeviceSpec.prepare_environment``): sets
   ``PJRT_DEVICE`` when the user did not and refuses a conflicting one. Imports neither torch
   nor torch_xla.
2. :func:`xla_shims` (from its ``DeviceSpec.load``): runs the version preflight (torch_xla x.y
   must pair with torch x.y) *before* importing torch_xla, then returns the four shims.

What the shims do: the device is ``torch_xla.device()``; ``ad.step()`` is ``torch_xla.sync()``;
``ad.synchronize()`` waits for the launched graphs; data loaders are wrapped in
``MpDeviceLoader``; ``ad.save`` gets every tensor on CPU in one batched transfer (``to_host``, as ``xm.save``)
and writes once, atomically, on global rank 0; autocast is bf16; compile is
``torch.compile(backend="openxla", dynamic=False)`` with torch_xla's persistent cache
(``xr.initialize_cache``) under ``ANYDEVICE_CACHE_DIR/xla/<pjrt>``; the process group is
``xla`` with ``init_method="xla://"``; the profiler is ``torch_xla.debug.profiler`` (an
``xp.start_trace`` session with one ``xp.StepTrace`` per ``ad.step()``, in
:mod:`anydevice.shims.xla_profiler`), writing ``.xplane.pb`` and ``.trace.json.gz``.

torch is imported only inside functions, so :func:`prepare_environment` runs before it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from anydevice import settings
from anydevice.errors import DeviceUnavailableError, UnsupportedFeatureError, VersionMismatchError
from anydevice.settings import Setting
from anydevice.shims import compile_options
from anydevice.shims.contracts import (
    Collectives,
    Compilation,
    CudaShaped,
    Diagnostics,
    HostTransfer,
    MemoryStats,
    Placement,
    Shims,
)
from anydevice.shims.recompiles import RecompileWatch, stop_noting_inputs

if TYPE_CHECKING:
    import torch

T = TypeVar("T")

PJRT_DEVICE: Final = Setting(
    "PJRT_DEVICE",
    "torch_xla's runtime device (CPU, TPU, CUDA, NEURON). anydevice sets it from the selection when "
    "unset and respects it when set.",
    owner="torch_xla",
)
"""Declared by every plugin that runs on torch_xla (``DeviceSpec.settings``)."""

PJRT_DEVICES = ("CPU", "TPU", "CUDA", "NEURON")
LAST_TORCH = (2, 9)
"""torch_xla 2.9.0 (November 2025) is torch_xla's last release: there is none for torch 2.10 or later."""


def torch_xla_ended(torch_version: str | None) -> bool:
    """True when no torch_xla release exists for this torch (2.10 or later): the XLA paths are closed there."""
    if torch_version is None:
        return False
    major, minor = (int("".join(c for c in part if c.isdigit()) or 0) for part in torch_version.split(".")[:2])
    return (major, minor) > LAST_TORCH


"""PJRT runtimes torch_xla 2.9 can select with ``PJRT_DEVICE``."""
LACKING_REDUCE_OPS: Final = frozenset({"AVG"})
"""``ReduceOp`` names torch_xla's ``xla`` process group rejects (read by the shim and by ``anydevice check``)."""
REFUSED_CALLS: Final = {
    "torch.inference_mode": (
        'torch_xla cannot run an XLA model under inference mode ("Cannot set version_counter for inference tensor"): '
        "the script stops there, after its training steps",
        "use torch.no_grad() there, or run with `anydevice run --cuda-compat` (inference mode runs as no_grad on xla)",
    ),
    "torch.Generator(device=)": (
        'a torch.Generator on an XLA device is refused by torch ("XLA device type not an accelerator")',
        "make the generator on the CPU (torch.Generator().manual_seed(s)), or run with `anydevice run --cuda-compat` "
        "(a generator asked for on xla is a CPU one seeded the same)",
    ),
}
"""Calls torch_xla refuses that unmodified scripts make after training (read by ``anydevice check`` from the source)."""
OPENXLA_OPTIONS = frozenset({"backend", "fullgraph", "dynamic", "disable"})
"""``torch.compile`` keywords ``openxla`` understands: it takes no inductor ``mode``/``options``."""


@dataclass(frozen=True)
class XlaVendor:
    """What differs between devices that run on torch_xla: a table of names and calls.

    :param name: the anydevice device name, for messages (``xla``, ``tpu``, ``neuron``).
    :param pjrt_device: the PJRT runtime (``CPU``, ``TPU``, ``CUDA``, ``NEURON``). A user's
        ``PJRT_DEVICE`` must agree with it (the ``xla`` plugin passes the user's own value).
    :param chip: the chip's marketing name (``TPU v5e``), or None; keys ``peak_tflops``.
    :param peak_tflops: dense bf16 TFLOP/s per chip name; a chip not in it has no peak (MFU unknown).
    :param persistent_cache: use torch_xla's persistent compilation cache (``xr.initialize_cache``).
        Off on PJRT CPU, whose executables cannot be deserialised by a later process.
    :param multiprocess: False where several processes cannot share the runtime (PJRT CPU).
    :param spmd_refusal: why ``ad.distributed.parallelize`` is refused here; empty: it lowers to SPMD.
    :param lockstep: packages whose x.y must equal torch's x.y, checked before any is imported.
    :param versions: more versions to report (``libtpu``, ``torch-neuronx``).
    """

    name: str
    pjrt_device: str
    chip: Callable[[], str | None] = lambda: None
    peak_tflops: Mapping[str, float] = field(default_factory=dict)
    persistent_cache: bool = True
    multiprocess: bool = True
    spmd_refusal: str = ""
    lockstep: tuple[str, ...] = ("torch_xla",)
    versions: Callable[[], dict[str, str]] = lambda: {}


def requested_pjrt_device(default: str = "CPU") -> str:
    """The PJRT runtime the user asked for with ``PJRT_DEVICE`` (upper case), else ``default``."""
    return (PJRT_DEVICE.get() or default).upper()


def preflight(vendor: XlaVendor) -> None:
    """Check that every lockstep package pairs with torch, reading metadata only (nothing imported).

    Raises :class:`VersionMismatchError` naming both versions and the pair to install, instead of
    the undefined-symbol crash a mismatched torch_xla gives at import.
    """
    from anydevice.contract.versions import check_pair

    for package in vendor.lockstep:
        pair = check_pair(package, "lockstep")
        if pair is None:
            raise DeviceUnavailableError(
                vendor.name,
                f"{package} is not installed",
                "pip install torch_xla with the torch of the same major.minor (e.g. torch==2.9.0 torch_xla==2.9.0)",
                problem="package_missing",
            )
        if not pair.ok:
            raise VersionMismatchError(
                vendor.name,
                pair.reason,
                pair.fix,
                package=package,
                package_version=pair.package_version,
                torch_version=pair.torch_version,
            )


def prepare_environment(vendor: XlaVendor) -> None:
    """Set what torch_xla reads at import: ``PJRT_DEVICE`` (unless the user set it) and the compile cache.

    A user's ``PJRT_DEVICE`` is kept (only upper-cased: torch_xla rejects ``cpu``); one that names
    another runtime than the selected device raises
    :class:`DeviceUnavailableError` (e.g. ``ANYDEVICE=tpu`` with ``PJRT_DEVICE=CPU``).
    """
    want = vendor.pjrt_device.upper()
    if want not in PJRT_DEVICES:
        raise DeviceUnavailableError(
            vendor.name,
            f"PJRT_DEVICE={vendor.pjrt_device} is not a PJRT runtime torch_xla knows",
            f"Set PJRT_DEVICE to one of {', '.join(PJRT_DEVICES)}.",
            problem="unsupported_platform",
        )
    have = PJRT_DEVICE.get()
    if have is None or have.upper() == want:
        os.environ[PJRT_DEVICE.name] = want  # unset, or another case: torch_xla only knows upper case
    else:
        raise DeviceUnavailableError(
            vendor.name,
            f"it runs on PJRT_DEVICE={want} but PJRT_DEVICE={have} is set",
            f"Unset PJRT_DEVICE (anydevice sets it), or select the device that PJRT_DEVICE={have} means "
            "(ANYDEVICE=xla runs any PJRT device).",
            problem="disabled",
        )


def check_processes(vendor: XlaVendor, local_world_size: int) -> dict[str, str]:
    """For ``Launch.env``: no extra variables; a clear error where the runtime runs one process only (PJRT CPU)."""
    if local_world_size > 1 and not vendor.multiprocess:
        raise _single_process_error(vendor, local_world_size)
    return {}


def _single_process_error(vendor: XlaVendor, processes: int) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{vendor.name} on PJRT_DEVICE={vendor.pjrt_device} runs one process, but {processes} were requested: "
        "torch_xla's CPU runtime gives every rank world size 1 and its collectives abort at rendezvous.",
        "Run one process (plain `python`), or test multi-process code with ANYDEVICE=cpu (gloo).",
    )


class XlaPlacement(Placement, Diagnostics, CudaShaped, HostTransfer):
    """Placement on a lazy XLA device: ops are traced until ``step()`` cuts and launches the graph."""

    lazy = True
    pinned_memory = False  # torch_xla registers no pinned host allocator (pin_memory() asks CUDA)

    def __init__(self, vendor: XlaVendor) -> None:
        super().__init__("xla")
        self.vendor = vendor
        self.recompiles = RecompileWatch(vendor.name)
        self._device_module: Any = None

    def device(self, index: int | None = None) -> torch.device:
        """``xla:0`` for the process's default while no device has been used (PJRT gives every process its devices
        from ordinal 0; under SPMD xla:0 is the virtual device): asking torch_xla would fix the SPMD mode, which must
        be chosen before the first tensor. Once a device is in use, or for an explicit index, torch_xla answers."""
        import torch
        import torch_xla

        if index is None and not torch_xla._XLAC._xla_get_spmd_config_is_locked():  # no device used yet
            return torch.device(self.device_type, 0)
        device: torch.device = torch_xla.device(index)  # torch_xla is untyped
        return device

    def device_count(self) -> int:
        import torch_xla

        return int(torch_xla.device_count())

    def set_device(self, index: int) -> None:
        """PJRT binds each process to its devices at start-up: only checks that ``index`` exists."""
        count = self.device_count()
        if not 0 <= index < count:
            raise UnsupportedFeatureError(
                f"xla:{index} does not exist: this process sees {count} {self.vendor.pjrt_device} device(s).",
                "Use an index below the count, or launch one process per device with `anydevice run -n N`.",
            )

    def synchronize(self) -> None:
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()

    def step(self) -> None:
        import torch_xla.debug.profiler as xp

        from anydevice.shims.xla_profiler import sync_step

        sync_step()  # torch_xla.sync(), inside an xp.StepTrace while ad.profile() records
        # Tell MpDeviceLoader the step was marked, so its next batch does not sync a second time.
        xp.set_tracer_marked_step(True)
        self.recompiles.after_step()  # one host counter read: warns once when steps keep compiling

    def materialize(self, tensors: list[Any]) -> None:
        """Compute ``tensors`` (XLA tensors still traced) on their own, before a step boundary: the step's graph then takes
        them as data. A batch sliced from a device tensor with a moving offset (``data[i:i+n]``) would otherwise bake
        the offset into every step's graph, a compile per step; its slice alone is a graph of one op."""
        import torch_xla

        on_device = [t for t in tensors if t.device.type == self.device_type]
        if on_device:
            torch_xla._XLAC._xla_sync_multi(on_device, devices=[], wait=False)

    def fallback_ops(self) -> dict[str, int]:
        """Ops torch_xla ran on the CPU (no XLA lowering), with call counts: its ``aten::`` metric counters."""
        import torch_xla.debug.metrics as met

        return {name: int(met.counter_value(name) or 0) for name in met.counter_names() if name.startswith("aten::")}

    def manual_seed(self, seed: int) -> None:
        import torch
        import torch_xla

        random.seed(seed)
        torch.manual_seed(seed)
        torch_xla.manual_seed(seed)

    def memory_stats(self) -> MemoryStats:
        import torch_xla.core.xla_model as xm

        try:
            info = dict(xm.get_memory_info(self.device()))
        except RuntimeError as exc:  # PJRT CPU: "GetAllocatorStats is not supported" (UNIMPLEMENTED)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return MemoryStats(reason=f"xla: the PJRT {self.vendor.pjrt_device} runtime reports no memory statistics ({first})")
        names = {"bytes_used": "allocated_bytes", "peak_bytes_used": "peak_allocated_bytes", "bytes_limit": "total_bytes"}
        return MemoryStats({new: int(info[old]) for old, new in names.items() if old in info})

    def data_loader(self, loader: Iterable[T]) -> Iterable[T]:
        import torch_xla.distributed.parallel_loader as pl

        wrapped: Iterable[T] = pl.MpDeviceLoader(loader, self.device())  # torch_xla is untyped
        return wrapped

    def to_host(self, obj: T) -> T:
        """Every XLA tensor in ``obj`` synced in one graph and copied to the CPU in one batched transfer."""
        import torch_xla.core.xla_model as xm

        on_host: T = xm._maybe_convert_to_cpu(obj)  # what xm.save does before torch.save (torch_xla is untyped)
        return on_host

    def is_writer(self) -> bool:
        """Without a process group, only ordinal 0 of a multi-process XLA runtime writes."""
        import torch_xla.runtime as xr

        return bool(xr.world_size() <= 1 or xr.global_ordinal() == 0)

    def compilations(self) -> int:
        """Graphs compiled since the device was selected (counted at each ``ad.step()``)."""
        return self.recompiles.compilations

    def device_module(self) -> Any:
        """``ad.device_module()``: a DeviceModule on this placement (``shims.cuda_shaped``)."""
        if self._device_module is None:
            from anydevice.shims.cuda_shaped import xla_device_module

            self._device_module = xla_device_module(self)
        return self._device_module

    def generator(self, seed: int) -> torch.Generator:
        """A seeded CPU generator: torch_xla has none on the device (``torch.Generator("xla:0")`` raises).

        Draw with it on the CPU and move the result (``torch.randn(shape, generator=g).to(ad.device())``);
        diffusers' ``randn_tensor`` does exactly that when handed a CPU generator.
        """
        import torch

        return torch.Generator().manual_seed(int(seed))


class XlaCompilation(Compilation):
    """``torch.compile(backend="openxla", dynamic=False)``; torch_xla's persistent cache where it works."""

    backend = "openxla"

    def __init__(self, vendor: XlaVendor) -> None:
        super().__init__("xla")
        self.vendor = vendor

    def cache_dir(self) -> Path | None:
        if self.vendor.persistent_cache:
            return settings.writable_cache_dir("xla", self.vendor.pjrt_device.lower())
        return None

    def initialize_cache(self) -> None:
        """Point torch_xla's persistent cache at :meth:`cache_dir` (before the first computation)."""
        import torch_xla.runtime as xr

        if self.vendor.persistent_cache:
            try:
                xr.initialize_cache(str(self.cache_dir()), readonly=False)
            except AssertionError:
                pass  # a computation already initialised the cache (torch_xla used before anydevice)

    def compile(self, model: T, **options: Any) -> T:
        import torch

        if options.get("backend", self.backend) == self.backend:
            compile_options.check(self.vendor.name, options, OPENXLA_OPTIONS, "openxla takes no inductor mode or options")
            if options.get("dynamic"):
                raise UnsupportedFeatureError(
                    f"ad.compile option 'dynamic=True' is not understood on {self.vendor.name}: openxla compiles static "
                    "shapes (a new shape is a new graph).",
                    "Leave dynamic unset (anydevice passes dynamic=False), or pad inputs to a few fixed shapes.",
                )
        else:
            compile_options.check(self.vendor.name, options, compile_options.TORCH_COMPILE)
        kwargs = {"backend": self.backend, "dynamic": False, **options}
        stop_noting_inputs()  # the recompile watch's global module hooks: torch.compile(module) warns while they exist
        return torch.compile(model, **kwargs)  # type: ignore[call-overload, no-any-return]  # no overload takes **kwargs


class XlaCollectives(Collectives):
    """Process group ``xla`` over ``xla://``; DDP with gradients as bucket views; no FSDP2."""

    backend = "xla"
    init_method = "xla://"
    lacking_reduce_ops = LACKING_REDUCE_OPS  # torch_xla's process group rejects ReduceOp.AVG
    fsdp = False
    tensor_parallel = "spmd"  # parallelize_module's hooks fail on an XLA DeviceMesh; mark_sharding works

    def __init__(self, vendor: XlaVendor, placement: XlaPlacement) -> None:
        super().__init__(placement)
        self.vendor = vendor
        self.tensor_parallel = "" if vendor.spmd_refusal else "spmd"

    def tensor_parallelism(self) -> Any:
        from anydevice.shims.tp_spmd import SpmdParallel

        if self.vendor.spmd_refusal:
            raise UnsupportedFeatureError(f"Tensor parallelism is not supported on {self.vendor.name}.", self.vendor.spmd_refusal)
        return SpmdParallel(self.vendor.name)

    def wrap(self, model: Any, strategy: str, **options: Any) -> Any:
        from anydevice.shims import parallel

        if strategy == "fsdp":
            raise UnsupportedFeatureError(
                f"FSDP2 (fully_shard) does not run on {self.vendor.name} (torch_xla): its DeviceMesh process groups "
                "are not initialised on XLA devices.",
                "Use wrap(model, 'ddp'), or torch_xla's own sharding (torch_xla.distributed.spmd / fsdp) directly.",
            )
        options.setdefault("gradient_as_bucket_view", True)
        return parallel.ddp(model, device_ids=None, **options)


def xla_shims(vendor: XlaVendor) -> Shims:
    """The four shims for a torch_xla device described by ``vendor``.

    Runs :func:`preflight` before importing torch_xla, refuses a multi-process launch where the
    runtime cannot take one, imports the process-group backend, and points the persistent compile
    cache at its directory. Call :func:`prepare_environment` first (``DeviceSpec.prepare_environment``).
    """
    preflight(vendor)
    world = int(settings.WORLD_SIZE.get() or 1)
    if world > 1 and not vendor.multiprocess:
        raise _single_process_error(vendor, world)
    import torch
    import torch_xla
    import torch_xla.distributed.xla_backend  # registers the "xla" process-group backend
    import torch_xla.runtime as xr

    from anydevice.shims.xla_profiler import XlaProfiling

    runtime = str(xr.device_type() or "").upper()
    if runtime != vendor.pjrt_device.upper():
        raise DeviceUnavailableError(
            vendor.name,
            f"torch_xla started the PJRT {runtime or 'unknown'} runtime, not {vendor.pjrt_device}",
            "torch_xla was initialised before anydevice set PJRT_DEVICE: select the device before using torch_xla.",
            problem="plugin_error",
        )
    placement = XlaPlacement(vendor)
    compilation = XlaCompilation(vendor)
    compilation.initialize_cache()
    return Shims(
        placement=placement,
        compilation=compilation,
        collectives=XlaCollectives(vendor, placement),
        profiling=XlaProfiling(vendor),
        versions={"torch": torch.__version__, "torch_xla": str(torch_xla.__version__), **vendor.versions()},
    )


def fallback_probe(run: Callable[[Any], object]) -> list[str]:
    """Run ``run(device)`` on torch_xla's device, cut the graph, and return the ops that ran on the CPU.

    ``anydevice check``'s local lowering check (the ``xla`` plugin's ``OpTable.probe``): the fallback
    counters of torch_xla's metrics before and after one op on PJRT CPU (set when ``PJRT_DEVICE`` is unset).
    """
    os.environ.setdefault(PJRT_DEVICE.name, "CPU")
    import torch_xla
    import torch_xla.debug.metrics as met

    def counts() -> dict[str, int]:
        return {n: int(met.counter_value(n) or 0) for n in met.counter_names() if n.startswith("aten::")}

    before = counts()
    run(torch_xla.device())
    torch_xla.sync()
    return sorted(op for op, n in counts().items() if n > before.get(op, 0))
