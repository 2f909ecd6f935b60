"""Facts the plan declares beside the chips catalogue, each with its source and date: the price of a chip-hour and
the efficiency (model FLOP utilisation) a comparable published training run reached. They are declarations, not
measurements: every number read from here is labelled "declared" with its source, and a price can be overridden
(``--price tpu-v5e=1.2``). A chip without an entry has an unknown price or efficiency (said, never guessed).
"""

from __future__ import annotations

from dataclasses import dataclass

from anydevice.errors import AnyDeviceError


@dataclass(frozen=True)
class Declared:
    """A declared number with where it comes from and when."""

    value: float
    source: str
    as_of: str

    def said(self) -> str:
        return f"declared: {self.source}, {self.as_of}"


_TPU_PRICES = "Google Cloud TPU pricing page, on-demand per chip-hour, us-central1 (as recalled; not fetched on this host)"
_GPU_PRICES = "Google Cloud A3/A2 VM on-demand price per 8-GPU (A3) or 1-GPU (A2) machine, divided per GPU (as recalled)"
PRICES: dict[str, Declared] = {
    "v4": Declared(3.22, _TPU_PRICES, "2026-12-07"),
    "v5e": Declared(1.20, _TPU_PRICES, "2026-12-07"),
    "v5p": Declared(4.20, _TPU_PRICES, "2026-12-07"),
    "v6e": Declared(2.70, _TPU_PRICES, "2026-12-07"),
    "h100": Declared(11.06, _GPU_PRICES + " (a3-highgpu-8g)", "2026-12-07"),
    "a100": Declared(3.67, _GPU_PRICES + " (a2-highgpu-1g)", "2026-12-07"),
}
"""USD per chip-hour, keyed by the catalogue's chip name."""

_MAXTEXT = "MaxText README's published training MFU of dense LLMs on TPU v4/v5e/v5p (50-60%; as recalled), taken at 0.5"
_FOUNDRY = "MosaicML LLM Foundry's published MFU of 7B-70B training on A100/H100 (about 40%; as recalled), taken at 0.4"
EFFICIENCY: dict[str, Declared] = {
    "v4": Declared(0.5, _MAXTEXT, "2026-12-07"),
    "v5e": Declared(0.5, _MAXTEXT, "2026-12-07"),
    "v5p": Declared(0.5, _MAXTEXT, "2026-12-07"),
    "v6e": Declared(0.5, _MAXTEXT + "; v6e: assumed as v5p's", "2026-12-07"),
    "h100": Declared(0.4, _FOUNDRY, "2026-12-07"),
    "h200": Declared(0.4, _FOUNDRY + "; H200: assumed as H100's", "2026-12-07"),
    "a100": Declared(0.4, _FOUNDRY, "2026-12-07"),
}
"""Fraction of the declared bf16 peak a tuned training step reaches (model FLOP utilisation), per chip name."""


def parse_prices(text: str | None) -> dict[str, float]:
    """``"tpu-v5e=1.2,cuda-h100=9"`` (or ``v5e=1.2``) -> ``{"v5e": 1.2, "h100": 9.0}``; bad input is one clear error."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, eq, value = item.partition("=")
        chip = name.strip().lower().rpartition("-")[2] if "-" in name else name.strip().lower()
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not eq or not chip or not price >= 0 or price == float("inf"):
            raise AnyDeviceError(
                f"--price {item.strip()!r}: write DEVICE-CHIP=USD per chip-hour, a number of 0 or more.",
                "For example --price tpu-v5e=1.2,cuda-h100=9.5",
            )
        out[chip] = price
    return out
