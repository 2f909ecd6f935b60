"""The TPU chips catalogue and slice names as Cloud TPU writes them (``v5e-8``, ``v6e-8``, ``v5p-8``, ``v4-8``,
``v7x-8``), with the topology libtpu's compiler takes for each (``v5e:2x4``). Pure data: imports nothing heavy.

:data:`CHIPS` is the tpu plugin's ``DeviceSpec.chips`` (declared here, beside the slice compiler that reads it,
because a shim cannot import a plugin). The number after the dash counts chips on v5e and v6e, and TensorCores on
v4, v5p and v7x (Cloud's own convention: ``v5p-8`` is 4 chips). libtpu's compiler needs a slice of at least one
host's chips (a 2x2 block): single-chip slices are refused with that reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from anydevice.contract.check_facts import GiB
from anydevice.contract.chips import Chip, SliceShape, chip_named, example, grid_shapes, shape_for
from anydevice.errors import AnyDeviceError

DOCS = "Google Cloud TPU docs (system architecture, per generation)"
TORCH_TPU = "torch_tpu 0.2.0 hardware tables (processes of a whole slice on one host)"
_TWO_D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_THREE_D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}
ONE_HOST = (1, 4, 8)
"""v5e and v6e hosts: 1, 4 or 8 chips (also the process counts torch_tpu runs on one host)."""
LITE = grid_shapes(_TWO_D, per_host=4, single_host=ONE_HOST)
"""v5e and v6e: one host of 1, 4 or 8 chips; a multi-host slice is hosts of 4 chips (``v5e-16``: 4 hosts, 4x4)."""
CUBE = grid_shapes(_THREE_D, per_host=4)
"""v4, v5p, v7x: hosts of 4 chips in a 3D torus (``v5p-16``: 8 chips, 2 hosts, 2x2x2)."""
CHIPS = (
    Chip(
        "v4",
        "TPU v4",
        DOCS,
        "2026-12-07",
        pci_ids=("0x005e",),
        cores=2,
        counts="cores",
        hbm_bytes=32 * GiB,
        hbm_bandwidth=1200e9,
        peak_bf16=275e12,
        shapes=CUBE,
        host_processes=(1, 2, 4, 8),
        topology_prefix="v4",
        accelerator_type="v4",
    ),
    Chip(
        "v5e",
        "TPU v5e",
        DOCS,
        "2026-12-07",
        aliases=("v5litepod", "v5lite", "TPU v5 lite"),
        pci_ids=("0x0063",),
        hbm_bytes=16 * GiB,
        hbm_bandwidth=819e9,
        peak_bf16=197e12,
        interconnect_bandwidth=1600e9 / 8,
        shapes=LITE,
        host_processes=ONE_HOST,
        topology_prefix="v5e",
        accelerator_type="v5litepod",
    ),
    Chip(
        "v5p",
        "TPU v5p",
        DOCS,
        "2026-12-07",
        pci_ids=("0x0062",),
        cores=2,
        counts="cores",
        hbm_bytes=95 * GiB,
        hbm_bandwidth=2765e9,
        peak_bf16=459e12,
        interconnect_bandwidth=4800e9 / 8,
        shapes=CUBE,
        topology_prefix="v5p",
        accelerator_type="v5p",
    ),
    Chip(
        "v6e",
        "TPU v6e",
        DOCS,
        "2026-12-07",
        aliases=("v6litepod", "TPU v6 lite", "trillium"),
        pci_ids=("0x006f",),
        hbm_bytes=32 * GiB,
        hbm_bandwidth=1640e9,
        peak_bf16=918e12,
        interconnect_bandwidth=3584e9 / 8,
        shapes=LITE,
        host_processes=ONE_HOST,
        topology_prefix="v6e",
        accelerator_type="v6e",
        llmd_label="tpu-v6e",
    ),
    Chip(
        "v7x",
        "TPU v7",
        DOCS + "; discuss.google.dev 'Optimizing frontier model training on TPU v7x' (HBM bandwidth)",
        "2026-12-07",
        aliases=("v7", "tpu7x", "ironwood", "TPU v7x"),
        pci_ids=("0x0076",),
        cores=2,
        devices=2,
        counts="cores",
        hbm_bytes=192 * GiB,
        hbm_bandwidth=7.38e12,
        peak_bf16=2307e12,
        peak_fp8=4614e12,
        interconnect_bandwidth=1.2e12,
        shapes=CUBE,
        host_processes=(2, 4, 8),
        topology_prefix="tpu7x",
        accelerator_type="tpu7x",
        llmd_label="tpu-v7x",
    ),
)
"""The TPU generations, each fact once (Google Cloud TPU docs; torch_tpu's whole-slice tables). HBM is the
datasheet's: libtpu states a little less as usable (v5e 15.75 GiB, v6e 31.25 GiB), and the compiled check reports
which it used. Interconnect is ICI per chip as the docs state it (Gbps / 8); v4's is not stated per chip there."""
EXAMPLE = example(CHIPS) or ""
"""A slice name for messages and help texts (``--target tpu:<EXAMPLE>``), read from :data:`CHIPS`."""
MIN_COMPILED_CHIPS = 4
"""libtpu's compiler refuses ``v5e:1x1`` and ``v5p:1x1x1`` ("not divisible by ... chips_per_host_bounds 2x2x1")."""


@dataclass(frozen=True)
class Slice:
    """A TPU slice to compile for: ``tpu:v5e-8`` is chip v5e, 8 chips, topology ``v5e:2x4``, one host."""

    name: str  # canonical Cloud name, "v5e-8"
    chip: Chip
    size: int  # the number after the dash, as Cloud counts it
    shape: SliceShape

    @property
    def chips(self) -> int:
        return self.shape.chips

    @property
    def topology(self) -> str:
        """libtpu's name, ``"v5e:2x4"``."""
        return self.chip.topology_name(self.shape) or ""

    @property
    def accelerator_type(self) -> str:
        """Cloud's accelerator type, ``"v5litepod-8"`` (libtpu's ``TPU_ACCELERATOR_TYPE``)."""
        return self.chip.accelerator_type_of(self.shape) or self.name

    @property
    def counting(self) -> str:
        """What the suffix counts, for the report: "8 chips" or "8 TensorCores (4 chips)"."""
        if self.chip.counts == "chips":
            return f"{self.size} chips"
        return f"{self.size} TensorCores ({self.chips} chips)"


def valid_names(chips: tuple[Chip, ...] = CHIPS) -> list[str]:
    """Every slice name the compiler takes (whole hosts of at least 4 chips), smallest first per generation."""
    return [f"{c.name}-{c.count_of(s)}" for c in chips if c.topology_prefix for s in c.shapes if s.chips >= MIN_COMPILED_CHIPS]


def parse_slice(text: str, chips: tuple[Chip, ...] = CHIPS) -> Slice:
    """``"v5e-8"`` (or ``"v5litepod-8"``, ``"tpu7x-8"``) -> :class:`Slice`; an unknown name lists the valid ones."""
    raw = text.strip().lower()
    head, sep, size_text = raw.rpartition("-")
    chip = chip_named(chips, head) if sep else None
    if chip is None or chip.topology_prefix is None or not size_text.isascii() or not size_text.isdigit():
        names = valid_names(chips)
        near = difflib.get_close_matches(raw, names, n=1)
        hint = f"Did you mean 'tpu:{near[0]}'? " if near else ""
        examples = ", ".join("tpu:" + n for n in names[:12])
        generations = ", ".join(c.name for c in chips if c.topology_prefix)
        raise AnyDeviceError(
            f"Unknown TPU slice {text!r} (generations: {generations}).",
            f"{hint}Name a generation and size as Cloud TPU writes them: {examples}, ...",
        )
    size = int(size_text)
    sizes = ", ".join(n for n in valid_names((chip,)))
    if size and size % chip.per_count == 0 and size // chip.per_count < MIN_COMPILED_CHIPS:
        raise AnyDeviceError(
            f"TPU slice {text!r}: libtpu's compiler takes slices of whole hosts (at least a 2x2 block of 4 chips), and "
            f"this is {size // chip.per_count} chip(s).",
            f"Valid {chip.name} slices: {sizes}.",
        )
    try:
        shape = shape_for(chip, size, "tpu", f"tpu:{text}")
    except AnyDeviceError as exc:
        raise AnyDeviceError(exc.message, f"Valid {chip.name} slices: {sizes}.") from None
    return Slice(f"{chip.name}-{size}", chip, size, shape)
