"""torch_xla's profiler for the lazy-XLA shims: trace sessions, step annotation, ``ad.record`` spans.

An ``xp.start_trace`` session records ``.xplane.pb`` and ``.trace.json.gz``; each ``ad.step()`` of a
recording session becomes an ``xp.StepTrace`` around the sync (the placement shim's ``step`` calls
:func:`sync_step`). torch_xla's profiler is process-wide, so one session at a time is active here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice.errors import UnsupportedFeatureError
from anydevice.shims.common import peak_flops
from anydevice.shims.contracts import Profiling, TraceSession

if TYPE_CHECKING:
    import torch

    from anydevice.shims.lazy_xla import XlaVendor

XPROF = "XProf or TensorBoard's profile plugin (`xprof --logdir DIR`); the .trace.json.gz opens in Perfetto"


class _StepTracer:
    """An ``xp.start_trace`` session that turns each ``ad.step()`` into an ``xp.StepTrace``.

    The StepTrace wraps only the sync: torch_xla raises when a sync (MpDeviceLoader makes one at
    the end of an epoch) happens inside an open trace scope. ``wait`` (plus ``warmup``) steps are
    skipped before recording starts; ``active`` steps are recorded (None: until the block ends).
    """

    def __init__(self, directory: Path, wait: int, active: int | None) -> None:
        self.directory = directory
        self.wait = wait
        self.active = active
        self.steps = 0
        self.recording = False
        self.done = False

    def start(self) -> None:
        import torch_xla.debug.profiler as xp

        xp.start_trace(str(self.directory))
        self.recording = True

    def stop(self) -> None:
        import torch_xla
        import torch_xla.debug.profiler as xp

        if self.recording:
            torch_xla.sync()
            xp.stop_trace()
            self.recording, self.done = False, True

    def step(self) -> None:
        import torch_xla
        import torch_xla.debug.profiler as xp

        if self.recording:
            with xp.StepTrace("train_step", step_num=self.steps):
                pass  # StepTrace's exit is torch_xla.sync(), recorded as this step
        else:
            torch_xla.sync()
        self.steps += 1
        if self.recording and self.active is not None and self.steps >= self.wait + self.active:
            self.stop()
        elif not self.recording and not self.done and self.steps == self.wait:
            self.start()


_active: _StepTracer | None = None
"""The recording session of this process, if any (torch_xla's profiler is process-wide)."""


def sync_step() -> None:
    """End a step: ``torch_xla.sync()``, inside an ``xp.StepTrace`` while a session records."""
    import torch_xla

    if _active is not None:
        _active.step()
    else:
        torch_xla.sync()


class XlaProfiling(Profiling):
    """torch_xla's profiler (``torch_xla.debug.profiler``); peak FLOP/s from the vendor's table."""

    def __init__(self, vendor: XlaVendor) -> None:
        super().__init__("xla")
        self.vendor = vendor
        self._server: Any = None

    def trace(self, directory: Path, **options: Any) -> AbstractContextManager[TraceSession]:
        return self._trace(Path(directory), **options)

    @contextmanager
    def _trace(
        self,
        directory: Path,
        *,
        wait: int | None = None,
        warmup: int = 0,
        active: int | None = None,
        port: int | None = None,
        **unsupported: Any,
    ) -> Iterator[TraceSession]:
        global _active
        asked = sorted(k for k, v in unsupported.items() if v)
        if asked:
            raise UnsupportedFeatureError(
                f"torch_xla's profiler has no option {', '.join(asked)}.",
                "Supported: wait, warmup, active (steps, advanced by ad.step()) and port (an XProf capture server).",
            )
        if _active is not None:
            raise UnsupportedFeatureError("A torch_xla trace is already recording in this process.", "Do not nest ad.profile().")
        if port is not None and self._server is None:
            import torch_xla.debug.profiler as xp

            self._server = xp.start_server(port)  # lets XProf/TensorBoard capture this process remotely
        directory.mkdir(parents=True, exist_ok=True)
        started = time.time_ns()
        session = TraceSession(directory=directory, viewer=XPROF, tool="torch_xla.debug.profiler")
        tracer = _StepTracer(directory, (wait or 0) + warmup, active)
        if tracer.wait == 0:
            tracer.start()
        _active = tracer
        try:
            yield session
        finally:
            _active = None
            tracer.stop()
            session.files.extend(
                p for p in sorted(directory.rglob("*")) if p.is_file() and p.stat().st_mtime_ns >= started - 1_000_000_000
            )

    def record(self, name: str) -> AbstractContextManager[None]:
        """An ``xp.Trace(name)`` span while a trace records; nothing otherwise.

        Outside a trace a span would only cost: torch_xla raises when a sync happens inside one.
        """
        if _active is None or not _active.recording:
            return nullcontext()
        import torch_xla.debug.profiler as xp

        trace: AbstractContextManager[None] = xp.Trace(name)  # torch_xla is untyped
        return trace

    def chip(self) -> str | None:
        return self.vendor.chip()

    def peak_flops(self, dtype: torch.dtype) -> float | None:
        return peak_flops(self.vendor.peak_tflops, self.chip(), dtype)
