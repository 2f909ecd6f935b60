"""A plugin's chips catalogue: each accelerator model it drives, declared once, with where the facts come from.

A plugin lists its chips on :attr:`DeviceSpec.chips <anydevice.contract.device_spec.DeviceSpec.chips>`; everything that
names a chip reads them from there: detection (a PCI id or a marketing name to the chip), the profiler's peak
FLOP/s and ``anydevice check``'s memory per chip, the device grammar (``tpu:v5e-8``, ``cuda:h200x8``: which
counts exist), the compiled TPU check (libtpu's topology name), ``anydevice serve-spec`` (the llm-d label, devices per
chip) and ``anydevice launch`` (hosts per slice, chips per host, the topology)::

    from anydevice.plugin import Chip, SliceShape
    from anydevice.plugin import chips as catalogue

    V6E = Chip(
        "v6e", "TPU v6e", source="Google Cloud TPU docs (v6e)", as_of="2026-12-07",
        aliases=("v6litepod", "TPU v6 lite", "trillium"), pci_ids=("0x006f",),
        hbm_bytes=32 * GiB, hbm_bandwidth=1640e9, peak_bf16=918e12,
        shapes=(SliceShape(1, "1x1"), SliceShape(4, "2x2"), SliceShape(8, "2x4"), SliceShape(16, "4x4", hosts=4)),
        topology_prefix="v6e", accelerator_type="v6e", llmd_label="tpu-v6e",
    )
    chip = catalogue.chip_named(spec.chips, "v6litepod")         # -> V6E (names, aliases and the model, any case)
    shape = chip.shape(16)                             # SliceShape(chips=16, topology="4x4", hosts=4)
    chip.topology_name(shape), shape.chips_per_host    # "v6e:4x4", 4

Every fact is optional except the chip's name, its model and the source with its date: an unknown fact is
None (reported as unknown, never guessed from a neighbour). Units are SI: bytes, bytes per second, FLOP per second.
Torch-free and import-free: ``anydevice check``, ``run`` and ``serve-spec`` read it without torch.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

MAX_COUNT: Final = 1 << 16
"""The largest count a device string may name when a chip declares no shapes (an absurd count is refused)."""


@dataclass(frozen=True)
class SliceShape:
    """One whole group of chips that can run together: a host, or a slice over several hosts.

    :param chips: chips in it.
    :param topology: the compiler's dimensions (``"2x4"``, ``"2x2x2"``), or None where the vendor names none (GPUs).
    :param hosts: machines it spans (``v5e-16``: 4 hosts of 4 chips).
    """

    chips: int
    topology: str | None = None
    hosts: int = 1

    @property
    def chips_per_host(self) -> int:
        """Chips on each of its hosts."""
        return self.chips // self.hosts


def host_shapes(*counts: int) -> tuple[SliceShape, ...]:
    """One-host shapes of these chip counts (``host_shapes(*range(1, 9))``: a GPU server takes 1 to 8 GPUs)."""
    return tuple(SliceShape(n) for n in counts)


@dataclass(frozen=True)
class Chip:
    """One accelerator model: its names, its hardware facts and the shapes it comes in.

    :param name: the name a device string uses (``v5e``, ``h200``, ``trn2``): lower-case ASCII letters and digits.
    :param model: what detection reports and facts are keyed by (``TPU v5e``, ``H200``, ``Trainium2``).
    :param source: where the facts come from (datasheets, docs, tables), one phrase; ``as_of``: its date (ISO).
    :param aliases: other names of the chip (Cloud's ``v5litepod``, JAX's device kind ``TPU v5 lite``, an EC2 family).
    :param pci_ids: PCI device ids (``0x0063``) detection maps to this chip.
    :param cores: compute cores per chip (TensorCores, NeuronCores); ``devices``: what the runtime and serving
        engines see per chip (v7x: 2; v5p: 1, its two TensorCores work as one; trn2: 4 logical NeuronCores at LNC=2).
    :param counts: what the number in a slice name counts: ``chips`` (``v5e-8``: 8 chips) or ``cores``
        (``v5p-8``: 8 TensorCores, 4 chips), as the vendor writes it.
    :param hbm_bytes: device memory per chip as the datasheet declares it (a compiler may state less as usable).
    :param hbm_bandwidth: bytes per second; ``peak_bf16``/``peak_fp8``: dense FLOP per second (None: none or unknown).
    :param interconnect_bandwidth: chip-to-chip bytes per second per chip (ICI, NVLink, NeuronLink), as declared.
    :param shapes: the chip counts it runs as (one host, or a multi-host slice), smallest first; empty: any count.
    :param host_processes: process counts one host runs as a whole slice (TorchTPU); empty: any count.
    :param topology_prefix: the compiler's generation name (``v5e``, ``tpu7x``: jax's ``get_topology_desc``).
    :param accelerator_type: the Cloud accelerator-type prefix (``v5litepod``: ``TPU_ACCELERATOR_TYPE=v5litepod-8``).
    :param llmd_label: llm-d's ``llm-d.ai/accelerator-variant`` value; a chip without one is not offered by serve-spec.
    """

    name: str
    model: str
    source: str
    as_of: str
    aliases: tuple[str, ...] = ()
    pci_ids: tuple[str, ...] = ()
    cores: int = 1
    devices: int = 1
    counts: Literal["chips", "cores"] = "chips"
    hbm_bytes: int | None = None
    hbm_bandwidth: float | None = None
    peak_bf16: float | None = None
    peak_fp8: float | None = None
    interconnect_bandwidth: float | None = None
    shapes: tuple[SliceShape, ...] = ()
    host_processes: tuple[int, ...] = ()
    topology_prefix: str | None = None
    accelerator_type: str | None = None
    llmd_label: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name that means this chip, lower case: its name, aliases and model."""
        return tuple(dict.fromkeys(n.lower() for n in (self.name, *self.aliases, self.model)))

    @property
    def per_count(self) -> int:
        """How many of what a slice name counts make one chip (2 for ``v5p-8``'s TensorCores; else 1)."""
        return self.cores if self.counts == "cores" else 1

    def count_of(self, shape: SliceShape) -> int:
        """The number a slice name writes for ``shape`` (``v5p``: 2 per chip)."""
        return shape.chips * self.per_count

    def shape(self, count: int) -> SliceShape | None:
        """The shape a slice name's ``count`` means (``v5e-16``: 16 chips on 4 hosts), or None when there is none."""
        if not self.shapes:
            return SliceShape(count // self.per_count) if 0 < count <= MAX_COUNT and count % self.per_count == 0 else None
        return next((s for s in self.shapes if self.count_of(s) == count), None)

    def slice_names(self) -> list[str]:
        """``["v5e-1", "v5e-4", ...]``: every shape as a slice name, smallest first."""
        return [f"{self.name}-{self.count_of(s)}" for s in self.shapes]

    def topology_name(self, shape: SliceShape) -> str | None:
        """The compiler's name of ``shape`` (``"v5e:2x4"``), or None when the chip or the shape names no topology."""
        return f"{self.topology_prefix}:{shape.topology}" if self.topology_prefix and shape.topology else None

    def accelerator_type_of(self, shape: SliceShape) -> str | None:
        """Cloud's accelerator type of ``shape`` (``"v5litepod-8"``), or None."""
        return f"{self.accelerator_type}-{self.count_of(shape)}" if self.accelerator_type else None


def example(chips: Iterable[Chip]) -> str | None:
    """A slice name for help texts and messages, read from the catalogue (never written elsewhere): the first chip whose
    slice names count chips (else the first chip), at its largest one-host shape (``v5e-8``, ``h100-8``); None: no chips."""
    chips = tuple(chips)
    chip = next((c for c in chips if c.counts == "chips"), chips[0] if chips else None)
    if chip is None:
        return None
    one_host = [s for s in chip.shapes if s.hosts == 1]
    return f"{chip.name}-{chip.count_of(one_host[-1])}" if one_host else chip.name


def chip_named(chips: Iterable[Chip], name: str) -> Chip | None:
    """The chip one of whose names (name, alias, model; any case, surrounding spaces ignored) is ``name``."""
    key = name.strip().lower()
    return next((c for c in chips if key in c.names), None)


def chip_of_pci(chips: Iterable[Chip], device_id: str) -> Chip | None:
    """The chip with the PCI device id ``device_id`` (``"0x0063"``), or None."""
    return next((c for c in chips if device_id.lower() in (i.lower() for i in c.pci_ids)), None)


def chip_in_text(chips: Iterable[Chip], text: str) -> Chip | None:
    """The chip whose model a device's name carries (``NVIDIA H100 80GB HBM3`` -> H100), most specific first.

    Without case; spaces and dashes inside the model are optional; the model must start a word and not run on
    into a digit (``L40`` is not ``L4``); the longest model that matches wins (``H100 PCIe`` before ``H100``).
    """
    upper = text.upper()

    def carries(model: str) -> bool:
        body = "[ -]?".join(re.escape(part) for part in re.split(r"[ -]+", model.upper()))
        return re.search(rf"(?<![A-Z0-9]){body}(?![0-9])", upper) is not None

    return max((c for c in chips if carries(c.model)), key=lambda c: len(c.model), default=None)


def near_names(chips: Iterable[Chip], name: str) -> list[str]:
    """The chip name closest to a typo (``v6f`` -> ``["v6e"]``), or none."""
    chips = tuple(chips)
    close = difflib.get_close_matches(name.strip().lower(), [n for c in chips for n in c.names], n=1, cutoff=0.5)
    return [c.name for c in chips if close and close[0] in c.names][:1]


def peaks_tflops(chips: Iterable[Chip]) -> dict[str, float]:
    """``{model: dense bf16 TFLOP/s}`` of the chips that declare a peak (what the profiling tables take)."""
    return {c.model: c.peak_bf16 / 1e12 for c in chips if c.peak_bf16 is not None}


def memory_per_chip(chips: Iterable[Chip]) -> dict[str, int]:
    """``{model: HBM bytes}`` of the chips that declare it (``CheckFacts.memory_per_chip``)."""
    return {c.model: c.hbm_bytes for c in chips if c.hbm_bytes is not None}


def host_processes(chips: Iterable[Chip]) -> dict[str, tuple[int, ...]]:
    """``{model: process counts of one host}`` of the chips that declare them (``CheckFacts.world_sizes``)."""
    return {c.model: c.host_processes for c in chips if c.host_processes}


def grid_shapes(dims: dict[int, str], *, per_host: int, single_host: tuple[int, ...] = ()) -> tuple[SliceShape, ...]:
    """Slice shapes from ``{chips: topology}``: ``single_host`` counts on one machine, the rest ``per_host`` chips a host."""
    return tuple(SliceShape(n, t, 1 if n in single_host else max(1, n // per_host)) for n, t in sorted(dims.items()))


# -- the chip part of the device grammar (``tpu:v5e-8``, ``cuda:h200x8``), shared by every parser ------------------
_COUNT = re.compile(r"[-x]([0-9]+)", flags=re.ASCII)
_HEAD = re.compile(r"[a-z][a-z0-9]*", flags=re.ASCII)


def shown(text: str, limit: int = 80) -> str:
    """``text`` as an error echoes it: control characters escaped, at most ``limit`` characters and then its length."""
    safe = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return safe if len(safe) <= limit else f"{safe[:limit]}… ({len(text):,} characters)"


def valid_list(device: str, chips: Iterable[Chip], limit: int = 12) -> str:
    """``"tpu:v4-8, tpu:v4-16, ..."``: what a device string may name, for an error's hint."""
    chips = tuple(chips)
    each = None if len(chips) == 1 else 3
    names = [f"{device}:{n}" for c in chips for n in (c.slice_names()[:each] if c.shapes else [f"{c.name}-1"])]
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def parse_variant(chips: tuple[Chip, ...], variant: str, device: str, text: str | None = None) -> tuple[Chip, int | None]:
    """``"v5e-8"`` -> (the v5e chip, 8); ``"h200"`` -> (H200, None): the chip by any of its names, and the count as written.

    A chip no name matches is refused with the closest name and the valid list; a count not written with the ASCII
    digits 0-9 (``v5e-²``) is refused. The count itself is judged by :func:`shape_for`.
    """
    from anydevice.errors import SelectionError

    text = text or f"{device}:{variant}"
    if not chips:
        raise SelectionError(
            f"'{shown(text)}': {device} names no slices or chips (its plugin declares none).",
            f"Write {device}, or {device}:N for a device index.",
        )
    best: tuple[Chip, str] | None = None
    for chip in chips:
        for name in chip.names:
            if variant.startswith(name) and (best is None or len(name) > len(best[1])):
                best = (chip, name)
    if best is not None:
        chip, name = best
        rest = variant[len(name) :]
        if not rest:
            return chip, None
        match = _COUNT.fullmatch(rest)
        if match is not None:
            return chip, int(match.group(1))
        if not _HEAD.fullmatch(rest.lstrip("-x")):  # a count, badly written (not a longer, unknown chip name)
            raise SelectionError(
                f"Bad count in '{shown(text)}': write it with the ASCII digits 0-9 after '-' (or 'x').",
                f"Valid: {valid_list(device, [chip])}.",
            )
    head = _HEAD.match(variant)
    unknown = head.group() if head else variant
    unknown = re.sub(r"x[0-9]+$", "", unknown)
    near = near_names(chips, unknown)
    hint = f"Did you mean '{near[0]}'? " if near else ""
    raise SelectionError(
        f"Unknown {device} chip '{shown(unknown)}' in '{shown(text)}'.",
        f"{hint}Known {device} chips: {', '.join(c.name for c in chips)} (e.g. {valid_list(device, chips, 4)}).",
    )


def shape_for(chip: Chip, count: int, device: str, text: str | None = None) -> SliceShape:
    """The shape ``count`` (as a slice name writes it) means for ``chip``; a clear refusal with the valid counts.

    Refused: 0, a count that is not a whole number of chips (``v7x-7``: TensorCores come 2 a chip), and a count no
    host or slice of the chip has (``v6e-7``; an absurd 40-digit one).
    """
    from anydevice.errors import SelectionError

    text = text or f"{device}:{chip.name}-{count}"
    valid = f"Valid: {valid_list(device, [chip], 64)}." if chip.shapes else f"Write a count from 1 to {MAX_COUNT:,}."
    what = chip.counts
    if count == 0:
        raise SelectionError(f"'{shown(text)}' asks for 0 {what}: a count is 1 or more.", valid)
    if count % chip.per_count:
        raise SelectionError(
            f"'{shown(text)}': no {chip.name} slice has {shown(str(count), 24)} {what}: it counts {what}, {chip.per_count} "
            "per chip, and that is not a whole number of chips.",
            valid,
        )
    shape = chip.shape(count)
    if shape is None:
        raise SelectionError(
            f"'{shown(text)}': no {chip.name} slice has {shown(str(count), 24)} {what} (no host or slice of that size).",
            valid,
        )
    return shape
