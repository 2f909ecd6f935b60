"""Graph compilations per ``ad.step()`` on lazy XLA devices, and a warning when they do not stop.

A lazy device compiles a graph the first time it sees it; a training loop settles after a few
steps (the first step, the first optimizer update) and then reuses its graphs. When new graphs
keep coming, every step pays a compile: the usual cause is a shape or a Python number that changes
each step (data kept on the device and sliced with a moving offset, a last batch of another size).

:class:`RecompileWatch` reads torch_xla's ``UncachedCompile`` counter after each step's sync (a
host-side counter: no tensor is read back) and warns once, with :class:`RecompileWarning`, when at
least :data:`THRESHOLD` of the last :data:`WINDOW` steps after the first :data:`WARMUP` compiled a
new graph. ``ad.backend().compilations`` reports the count.
"""

from __future__ import annotations

import warnings
from collections import deque

WARMUP = 5
"""Steps whose compilations are expected (first forward/backward, first optimizer step, ...)."""
WINDOW = 10
"""How many recent steps (after warm-up) are looked at."""
THRESHOLD = 5
"""Compiling steps within the window that trigger the warning."""


class RecompileWarning(UserWarning):
    """Steps keep compiling new XLA graphs after warm-up (each step pays a compilation)."""


def compile_count() -> int:
    """Graphs torch_xla compiled in this process so far (its ``UncachedCompile`` counter)."""
    import torch_xla.debug.metrics as met

    return int(met.counter_value("UncachedCompile") or 0)


class RecompileWatch:
    """Counts compilations at every step of one selected device; warns once when they keep coming."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.steps = 0
        self.baseline = compile_count()
        self.last = self.baseline
        self.recent: deque[bool] = deque(maxlen=WINDOW)
        self.warned = False

    @property
    def compilations(self) -> int:
        """Graphs compiled since the device was selected."""
        return compile_count() - self.baseline

    def after_step(self) -> None:
        """Call after each step's sync: one counter read, no device work."""
        now = compile_count()
        compiled, self.last = now > self.last, now
        self.steps += 1
        if self.steps <= WARMUP:
            return
        self.recent.append(compiled)
        if not self.warned and sum(self.recent) >= THRESHOLD:
            self.warned = True
            warnings.warn(self.message(), RecompileWarning, stacklevel=4)

    def message(self) -> str:
        """The warning: how often, the likely cause, and how to find it."""
        return (
            f"anydevice: {self.device}: {sum(self.recent)} of the last {len(self.recent)} ad.step() calls compiled a new "
            f"XLA graph ({self.last - self.baseline} graphs in {self.steps} steps), so every step pays a compilation. "
            "Likely cause: a shape or a Python number that changes every step, e.g. data kept on the device and sliced "
            "with a moving offset (data[i:i+n] with a new i each step), batches of varying size, or .item() inside the "
            "step. Find it with PT_XLA_DEBUG_LEVEL=2 (it says why each graph compiled) or "
            "torch_xla.debug.metrics.metrics_report() (CompileTime, UncachedCompile); keep shapes fixed, e.g. slice on "
            "the CPU and move each batch (ad.data_loader)."
        )
