"""The xla plugin: any PJRT device through torch_xla (CPU, TPU, CUDA, NEURON).

``PJRT_DEVICE`` picks the runtime; when it is unset anydevice sets it to ``CPU``, so
``ANYDEVICE=xla`` trains on real XLA on any machine. The shims are the shared lazy-XLA ones
(``anydevice.shims.lazy_xla``). On PJRT CPU the lane is single-process and the persistent
compile cache is off (a later process cannot deserialise CPU executables).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from anydevice.plugin import (
    ALL_DTYPES,
    CheckFacts,
    Detection,
    DeviceSpec,
    Evidence,
    Hardware,
    Launch,
    OpTable,
    Serving,
    Shims,
    XlaVendor,
    hookimpl,
    lazy_xla,
    versions,
    xla_shims,
)
from anydevice.plugin import detection as d

if TYPE_CHECKING:
    from anydevice.plugin import Check, Devices, DoctorContext

LAST_TORCH, PJRT_DEVICE, PJRT_DEVICES = lazy_xla.LAST_TORCH, lazy_xla.PJRT_DEVICE, lazy_xla.PJRT_DEVICES
requested_pjrt_device, torch_xla_ended = lazy_xla.requested_pjrt_device, lazy_xla.torch_xla_ended

NAME = "xla"
HOST = "CPU"
"""The PJRT runtime on the host CPU: always present, single-process, no persistent cache."""
CHECK_FACTS = CheckFacts(
    dtypes=ALL_DTYPES,  # PJRT CPU computes float64 and complex; a TPU behind PJRT_DEVICE does not (check --target tpu)
    static_shapes=True,  # lazy tensors and openxla trace static shapes: a new shape is a new graph
    op_table=OpTable(
        source="torch_xla's XLA kernels and a lowering probe on PJRT CPU",
        dispatch_key="XLA",
        module="torch_xla",
        probe="anydevice.plugin:lazy_xla.fallback_probe",  # through the door, as every plugin import
    ),
    fallback="counters",  # torch_xla counts each op it ran on the CPU (torch_xla.debug.metrics)
    compile_backends=("openxla",),
    dist_backend="xla",
    lacking_reduce_ops=lazy_xla.LACKING_REDUCE_OPS,
    sources=("torch_xla 2.9 on PJRT CPU (ran)",),
    refused_calls=lazy_xla.REFUSED_CALLS,
)
"""What ``anydevice check`` reads for xla: ops are judged by the XLA kernels torch_xla registers, when it is importable."""

# What the matrix should see fail or skip on xla; each entry is backed by a real run.
UNSUPPORTED = {
    # shims/lazy_xla.py raises UnsupportedFeatureError: fully_shard on torch_xla raised "DeviceMesh process
    # groups not initialized" [ran]; compat_matrix/results/xla-pjrt-cpu.json, fsdp_step fails at place.
    "fsdp_step": "FSDP2 (fully_shard) does not run on torch_xla; use wrap(model, 'ddp') or torch_xla's SPMD sharding.",
    # compat_matrix/results/xla-pjrt-cpu.json: pin_memory() raised "Found no NVIDIA driver" on PJRT CPU [ran].
    "pin_memory": "torch_xla registers no pinned host allocator: Tensor.pin_memory() asks CUDA, which PJRT CPU lacks.",
    # shims/lazy_xla.py OPENXLA_OPTIONS: ad.compile rejects dynamic=True on xla (openxla traces static shapes).
    "compile_dynamic_shapes": "openxla compiles static shapes (each new shape is a new graph); ad.compile rejects dynamic=True.",
    # torch 2.9 raised "`fused=True` requires ... floating point Tensors of supported devices ... and xla" [ran];
    # anydevice.integrations.transformers swaps Trainer's fused AdamW for the unfused one on such devices.
    "adamw_fused_step": "torch's fused AdamW has no XLA kernel (fused=True is refused for xla tensors); the unfused one works.",
}

INSTALL = "pip install torch_xla with the torch of the same major.minor (e.g. torch==2.9.0 torch_xla==2.9.0)"
LAST = ".".join(map(str, LAST_TORCH))
NATIVE_PACKAGES: dict[str, tuple[str, str, str]] = {
    "tpu": ("TPU", "TorchTPU (torch_tpu)", "pip install torch_tpu on a Cloud TPU VM (torch 2.11 to 2.15)"),
    "neuron": (
        "Trainium",
        "TorchNeuron (torch-neuronx)",
        "pip install torch-neuronx from AWS's Neuron index on Trn2/Trn3 (torch 2.13 or 2.14)",
    ),
}
"""Per device: its hardware, the native PyTorch package that replaces torch_xla there after torch 2.9, how to install it."""


def end_note(torch_version: str) -> str:
    """Why there is no torch_xla for this torch, and which native package each hardware uses instead."""
    where = ", ".join(
        f"on {hardware} {package} (ANYDEVICE={device})" for device, (hardware, package, _) in NATIVE_PACKAGES.items()
    )
    minor = ".".join(map(str, d.major_minor(torch_version)))
    return f"none exists for torch {minor}: torch_xla ends at torch {LAST}; use {where}"


def end_fix() -> str:
    """How to get each native stack instead, or torch_xla itself in a torch 2.9 environment."""
    native = "; ".join(f"ANYDEVICE={device}: {install}" for device, (_, _, install) in NATIVE_PACKAGES.items())
    return f"{native}; torch_xla itself only beside torch {LAST}: pip install torch==2.9.0 torch_xla==2.9.0"


def owner(pjrt: str, registry: Devices) -> tuple[str, Hardware] | None:
    """The device of ``registry`` whose hardware ``PJRT_DEVICE=pjrt`` names (``Hardware.pjrt_names``), and that section."""
    for name in registry.names():
        hardware = registry.spec(name).hardware
        if name != NAME and hardware is not None and pjrt in hardware.pjrt_names:
            return name, hardware
    return None


def hardware_present(pjrt: str, registry: Devices) -> tuple[bool, str]:
    """Whether the PJRT runtime's hardware is present, and what was seen: the owning plugin's cheap scan."""
    if pjrt == HOST:
        return True, "the host CPU"
    found_owner = owner(pjrt, registry)
    if found_owner is None or found_owner[1].scan is None:
        return True, f"{pjrt} hardware not checked (no installed plugin scans for it)"
    device, hardware = found_owner
    found = hardware.scan() if hardware.scan is not None else []
    seen = f"{len(found)} {pjrt} device(s)" if found else f"no {pjrt} chip (the {device} plugin's hardware scan found none)"
    return bool(found), seen


def ray_resource(registry: Devices) -> str | None:
    """The Ray resource of the hardware behind ``PJRT_DEVICE`` (the owning device's), None on PJRT CPU."""
    found_owner = owner(requested_pjrt_device(HOST), registry)
    resource = found_owner[1].ray_resource if found_owner is not None else None
    return resource() if callable(resource) else resource


def detect(registry: Devices) -> Detection:
    pair = versions.check_pair("torch_xla", "lockstep")
    if pair is None:
        torch = d.torch_version()
        if torch_xla_ended(torch):
            return Detection.missing(f"torch_xla is not installed, and {end_note(torch or '')}", end_fix(), "package_missing")
        return Detection.missing("torch_xla is not installed", INSTALL, "package_missing")
    if not pair.ok:
        return Detection.missing(pair.reason, pair.fix, "version_mismatch")
    pjrt = requested_pjrt_device()
    if pjrt not in PJRT_DEVICES:
        fix = f"set PJRT_DEVICE to one of {', '.join(PJRT_DEVICES)}"
        return Detection.missing(f"PJRT_DEVICE={pjrt} is not a PJRT runtime", fix, "unsupported_platform")
    present, seen = hardware_present(pjrt, registry)
    if not present:
        return Detection.missing(
            f"PJRT_DEVICE={pjrt} is set but this machine has {seen}",
            "unset PJRT_DEVICE (ANYDEVICE=xla then runs on PJRT CPU), or run where that hardware is",
            "no_hardware",
        )
    return Detection.ok(f"torch_xla {pair.package_version} on PJRT_DEVICE={pjrt} ({seen})", chip=f"PJRT {pjrt}", pjrt_device=pjrt)


def vendor() -> XlaVendor:
    pjrt = requested_pjrt_device(HOST)
    return XlaVendor(
        name=NAME,
        pjrt_device=pjrt,  # the user's PJRT_DEVICE, else CPU
        peak_tflops={},  # a generic PJRT device has no known peak: MFU stays unknown
        persistent_cache=pjrt != HOST,  # PJRT CPU cannot deserialise cached executables
        multiprocess=pjrt != HOST,  # PJRT CPU: every rank sees world size 1, collectives abort
        versions=lambda: {p: v for p in ("libtpu",) if (v := d.version_of(p))},
    )


def prepare_environment() -> None:
    lazy_xla.prepare_environment(vendor())


def _launch_env(local_rank: int, local_world_size: int) -> dict[str, str]:
    return lazy_xla.check_processes(vendor(), local_world_size)


def load() -> Shims:
    return xla_shims(vendor())


SERVING = {
    "vllm": Serving(hint="vLLM has no generic PJRT platform: on a Cloud TPU select ANYDEVICE=tpu with vllm-tpu installed"),
    "sglang": Serving(hint="SGLang has no PJRT (torch_xla) platform"),
}
"""Serving engines have no PJRT platform (anydevice.integrations says so when ANYDEVICE selects xla)."""


EVIDENCE = Evidence.stand_in("torch_xla 2.9 on PJRT CPU (compat_matrix/results/xla-pjrt-cpu.json)", "2026-12-02")
"""What stands behind this plugin (``anydevice list``, ``ad.capabilities()``, the matrix)."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None], registry: Devices) -> None:
    register(
        DeviceSpec(
            name=NAME,
            detect=functools.partial(detect, registry),  # finds the hardware behind PJRT_DEVICE among registry's devices
            load=load,
            prepare_environment=prepare_environment,
            priority=-10,
            vendor_package="torch_xla",
            unsupported=UNSUPPORTED,
            vendor_modules=("torch_xla",),
            paired_packages={"torch_xla": "lockstep"},
            settings=(PJRT_DEVICE,),
            hardware=Hardware(ray_resource=functools.partial(ray_resource, registry)),
            launch=Launch(env=_launch_env),  # refuses several processes on PJRT CPU
            serving=SERVING,
            check=CHECK_FACTS,
            evidence=EVIDENCE,
        )
    )


@hookimpl
def anydevice_doctor_checks(context: DoctorContext) -> list[Check]:
    """``PJRT_DEVICE`` against the selection: it must name the hardware of the device selected (unless xla)."""
    from anydevice.plugin import Check

    name = PJRT_DEVICE.name
    value = (PJRT_DEVICE.get() or "").upper()
    if not value:
        return []
    explicit = bool(context.requested_names)
    names = context.requested_names or ([context.selected] if context.selected else [])
    for device in names:
        if device == NAME:
            return [Check(name, "ok", f"{name}={value} picks the runtime of the {NAME} device")]
        canonical = context.registry.canonical(device)
        hardware = context.registry.spec(canonical).hardware if canonical else None
        wanted = hardware.pjrt_names if hardware is not None else ()
        if wanted and value not in wanted:
            how = f"ANYDEVICE={context.requested} selects {device}" if explicit else f"ANYDEVICE=auto picked {device}"
            return [
                Check(
                    name,
                    "fail" if explicit else "warn",
                    f"{name}={value} asks torch_xla for {value} but {how}",
                    f"unset {name}, or run on {value} through torch_xla with ANYDEVICE={NAME} {name}={value}",
                )
            ]
    if not names:
        return [Check(name, "info", f"{name}={value} applies only when the {NAME} device is selected")]
    return [Check(name, "ok", f"{name}={value} agrees with ANYDEVICE={context.requested}")]
