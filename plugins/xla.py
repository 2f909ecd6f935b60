"""The xla plugin: any PJRT device through torch_xla (CPU, TPU, CUDA, NEURON).

``PJRT_DEVICE`` picks the runtime; when it is unset anydevice sets it to ``CPU``, so
``ANYDEVICE=xla`` trains on real XLA on any machine. The shims are the shared lazy-XLA ones
(``anydevice.shims.lazy_xla``). On PJRT CPU the lane is single-process and the persistent
compile cache is off (a later process cannot deserialise CPU executables).
"""

from __future__ import annotations

from collections.abc import Callable

from anydevice.device_spec import Detection, DeviceSpec
from anydevice.hookspecs import hookimpl
from anydevice.shims import detect as d
from anydevice.shims import versions
from anydevice.shims.contracts import Shims
from anydevice.shims.lazy_xla import PJRT_DEVICES, XlaVendor, requested_pjrt_device

# What the matrix should see fail or skip on xla; each entry is backed by a real run.
UNSUPPORTED = {
    # shims/lazy_xla.py raises UnsupportedFeatureError: fully_shard on torch_xla raised "DeviceMesh process
    # groups not initialized" [ran]; compat_matrix/results/xla-pjrt-cpu.json, fsdp_step fails at place.
    "fsdp_step": "FSDP2 (fully_shard) does not run on torch_xla; use wrap(model, 'ddp') or torch_xla's SPMD sharding.",
    # compat_matrix/results/xla-pjrt-cpu.json: pin_memory() raised "Found no NVIDIA driver" on PJRT CPU [ran].
    "pin_memory": "torch_xla registers no pinned host allocator: Tensor.pin_memory() asks CUDA, which PJRT CPU lacks.",
}

INSTALL = "pip install torch_xla with the torch of the same major.minor (e.g. torch==2.9.0 torch_xla==2.9.0)"


def hardware(pjrt: str) -> tuple[bool, str]:
    """Whether the PJRT runtime's hardware is present (a cheap check, nothing imported), and what was seen."""
    if pjrt == "CPU":
        return True, "the host CPU"
    if pjrt == "TPU":
        from anydevice.plugins.tpu import tpu_chips

        chips = tpu_chips()
        return bool(chips), f"{len(chips)} TPU chip(s)" if chips else "no TPU chip (PCI vendor 0x1ae0 with /dev/vfio)"
    pattern = {"CUDA": "/dev/nvidia[0-9]*", "NEURON": "/dev/neuron[0-9]*"}[pjrt]
    found = d.device_files(pattern)
    return bool(found), f"{len(found)} {pjrt} device(s)" if found else f"no {pjrt} device ({pattern})"


def detect() -> Detection:
    pair = versions.check_pair("torch_xla")
    if pair is None:
        return Detection.missing("torch_xla is not installed", INSTALL, "package_missing")
    if not pair.ok:
        return Detection.missing(pair.reason, pair.fix, "version_mismatch")
    pjrt = requested_pjrt_device()
    if pjrt not in PJRT_DEVICES:
        fix = f"set PJRT_DEVICE to one of {', '.join(PJRT_DEVICES)}"
        return Detection.missing(f"PJRT_DEVICE={pjrt} is not a PJRT runtime", fix, "unsupported_platform")
    present, seen = hardware(pjrt)
    if not present:
        return Detection.missing(
            f"PJRT_DEVICE={pjrt} is set but this machine has {seen}",
            "unset PJRT_DEVICE (ANYDEVICE=xla then runs on PJRT CPU), or run where that hardware is",
            "no_hardware",
        )
    return Detection.ok(f"torch_xla {pair.package_version} on PJRT_DEVICE={pjrt} ({seen})", chip=f"PJRT {pjrt}", pjrt_device=pjrt)


def vendor() -> XlaVendor:
    pjrt = requested_pjrt_device()
    return XlaVendor(
        name="xla",
        pjrt_device=pjrt,  # the user's PJRT_DEVICE, else CPU
        peak_tflops={},  # a generic PJRT device has no known peak: MFU stays unknown
        persistent_cache=pjrt != "CPU",  # PJRT CPU cannot deserialise cached executables
        multiprocess=pjrt != "CPU",  # PJRT CPU: every rank sees world size 1, collectives abort
        versions=lambda: {p: v for p in ("libtpu",) if (v := d.version_of(p))},
    )


def prepare_environment() -> None:
    from anydevice.shims.lazy_xla import prepare_environment as prepare

    prepare(vendor())


def load() -> Shims:
    from anydevice.shims.lazy_xla import xla_shims

    return xla_shims(vendor())


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(
        DeviceSpec(
            name="xla",
            detect=detect,
            load=load,
            prepare_environment=prepare_environment,
            priority=-10,
            vendor_package="torch_xla",
            description="any PJRT device via torch_xla (PJRT_DEVICE; CPU when unset)",
            unsupported=UNSUPPORTED,
        )
    )
