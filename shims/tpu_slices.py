"""TPU slice names as Cloud TPU writes them (``v5e-8``, ``v6e-8``, ``v5p-8``, ``v4-8``, ``v7x-8``) and the
topology libtpu's compiler takes for each (``v5e:2x4``). Pure data: imports nothing heavy.

The number after the dash counts chips on v5e and v6e, and TensorCores on v4, v5p and v7x (Cloud's own
convention: ``v5p-8`` is 4 chips). libtpu's compiler needs a slice of at least one host's chips (a 2x2
block): single-chip slices are refused with that reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from anydevice.errors import AnyDeviceError


@dataclass(frozen=True)
class Generation:
    """One TPU generation: its Cloud name, libtpu's topology prefix, what the slice suffix counts and the shapes."""

    name: str
    topology_prefix: str
    counts: str  # "chips" or "TensorCores"
    cores_per_chip: int
    shapes: dict[int, str]  # chips -> topology dims


_TWO_D = {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_THREE_D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}

GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("v4", "v4", "TensorCores", 2, _THREE_D),
        Generation("v5e", "v5e", "chips", 1, _TWO_D),
        Generation("v5p", "v5p", "TensorCores", 2, _THREE_D),
        Generation("v6e", "v6e", "chips", 1, _TWO_D),
        Generation("v7x", "tpu7x", "TensorCores", 2, _THREE_D),
    )
}
ALIASES = {"v5litepod": "v5e", "v6litepod": "v6e", "tpu7x": "v7x", "v7": "v7x"}


@dataclass(frozen=True)
class Slice:
    """A TPU slice to compile for: ``tpu:v5e-8`` is generation v5e, 8 chips, topology ``v5e:2x4``."""

    name: str  # canonical Cloud name, "v5e-8"
    generation: Generation
    size: int  # the number after the dash, as Cloud counts it
    chips: int
    topology: str  # libtpu's name, "v5e:2x4"

    @property
    def counting(self) -> str:
        """What the suffix counts, for the report: "8 chips" or "8 TensorCores (4 chips)"."""
        if self.generation.counts == "chips":
            return f"{self.size} chips"
        return f"{self.size} TensorCores ({self.chips} chips)"


def valid_names() -> list[str]:
    """Every slice name this module knows, smallest first per generation."""
    out = []
    for g in GENERATIONS.values():
        out += [f"{g.name}-{chips * (g.cores_per_chip if g.counts == 'TensorCores' else 1)}" for chips in g.shapes]
    return out


def parse_slice(text: str) -> Slice:
    """``"v5e-8"`` (or ``"v5litepod-8"``, ``"tpu7x-8"``) -> :class:`Slice`; an unknown name lists the valid ones."""
    raw = text.strip().lower()
    gen_name, sep, size_text = raw.rpartition("-")
    gen_name = ALIASES.get(gen_name, gen_name)
    generation = GENERATIONS.get(gen_name)
    if not sep or generation is None or not size_text.isdigit():
        near = difflib.get_close_matches(raw, valid_names(), n=1)
        hint = f"Did you mean 'tpu:{near[0]}'? " if near else ""
        examples = ", ".join("tpu:" + n for n in valid_names()[:12])
        raise AnyDeviceError(
            f"Unknown TPU slice {text!r}.", f"{hint}Name a generation and size as Cloud TPU writes them: {examples}, ..."
        )
    size = int(size_text)
    per_chip = generation.cores_per_chip if generation.counts == "TensorCores" else 1
    chips, rest = divmod(size, per_chip)
    if rest or chips not in generation.shapes:
        sizes = ", ".join(f"{generation.name}-{c * per_chip}" for c in generation.shapes)
        why = (
            f"libtpu's compiler takes slices of whole hosts (at least a 2x2 block of 4 chips), and this is {chips} chip(s)"
            if chips < 4 and not rest
            else f"no {generation.name} slice has {size} {generation.counts}"
        )
        raise AnyDeviceError(f"TPU slice {text!r}: {why}.", f"Valid {generation.name} slices: {sizes}.")
    return Slice(f"{generation.name}-{size}", generation, size, chips, f"{generation.topology_prefix}:{generation.shapes[chips]}")
