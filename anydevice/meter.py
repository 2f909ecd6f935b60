"""Throughput and MFU: :class:`StepMeter` and a transformer FLOPs helper.

MFU = achieved FLOP/s / (peak FLOP/s per chip x chips). The peak comes from the selected
plugin's table for the detected chip; an unknown chip gives ``mfu=None`` and says why.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from anydevice.backend import current

if TYPE_CHECKING:
    import torch


def transformer_training_flops_per_token(n_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """Training FLOPs per token of a decoder-only transformer (PaLM appendix B).

    ``6 * N`` for the forward and backward matmuls over ``N`` non-embedding parameters, plus
    ``12 * L * d * T`` for attention scores and values over a context of ``T`` tokens.
    """
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


@dataclass(frozen=True)
class MeterReport:
    """What a :class:`StepMeter` measured; ``mfu`` is None when the chip's peak is unknown."""

    steps: int
    timed_steps: int
    seconds: float
    step_time_s: float | None
    tokens_per_s: float | None
    samples_per_s: float | None
    flops_per_s: float | None
    peak_flops_per_s: float | None
    chips: int
    mfu: float | None
    mfu_note: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy."""
        return asdict(self)


class StepMeter:
    """Times steps (synchronising the device, so async and lazy devices are timed right).

    Call :meth:`step` once at the end of every step; the first ``warmup`` steps (compilation)
    are not timed.
    """

    def __init__(
        self,
        flops_per_step: float | None = None,
        tokens_per_step: int | None = None,
        samples_per_step: int | None = None,
        dtype: torch.dtype | None = None,
        chips: int | None = None,
        warmup: int = 1,
    ) -> None:
        self.flops_per_step = flops_per_step
        self.tokens_per_step = tokens_per_step
        self.samples_per_step = samples_per_step
        self.dtype = dtype
        self.chips = chips
        self.warmup = warmup
        self.steps = 0
        self._timed_seconds = 0.0
        self._last: float | None = None

    def start(self) -> None:
        """Start the clock (called implicitly by the first :meth:`step`)."""
        current().shims.placement.synchronize()
        self._last = time.perf_counter()

    def step(self) -> None:
        """End one step: synchronise the device and record its duration."""
        current().shims.placement.synchronize()
        now = time.perf_counter()
        if self._last is not None and self.steps >= self.warmup:
            self._timed_seconds += now - self._last
        self._last = now
        self.steps += 1

    def report(self) -> MeterReport:
        """Throughput, FLOP/s and MFU over the timed steps."""
        timed = max(0, self.steps - max(self.warmup, 1))
        seconds = self._timed_seconds
        rate = (timed / seconds) if timed and seconds > 0 else None
        backend = current()
        chips = self.chips or _world_size()
        import torch

        dtype = self.dtype or torch.bfloat16
        peak_one = backend.shims.profiling.peak_flops(dtype)
        flops = self.flops_per_step * rate if (rate and self.flops_per_step) else None
        if peak_one is None:
            mfu, note = None, f"unknown peak for chip {backend.chip or 'unknown'} on {backend.name}: MFU not computed"
        elif flops is None:
            mfu, note = None, "no flops_per_step given or no timed steps"
        else:
            mfu, note = flops / (peak_one * chips), f"peak {peak_one / 1e12:g} TFLOP/s x {chips} chip(s), {dtype}"
        return MeterReport(
            steps=self.steps,
            timed_steps=timed,
            seconds=seconds,
            step_time_s=(1 / rate) if rate else None,
            tokens_per_s=self.tokens_per_step * rate if (rate and self.tokens_per_step) else None,
            samples_per_s=self.samples_per_step * rate if (rate and self.samples_per_step) else None,
            flops_per_s=flops,
            peak_flops_per_s=peak_one * chips if peak_one else None,
            chips=chips,
            mfu=mfu,
            mfu_note=note,
        )


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
