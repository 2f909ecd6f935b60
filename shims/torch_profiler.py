"""A trace session over ``torch.profiler`` for eager devices (cpu, cuda, xpu, mps, native tpu/neuron).

Writes Chrome-trace JSON (opens in Perfetto or chrome://tracing). With ``wait``/``warmup``/``active``
the profiler follows a schedule advanced by ``ad.step()``; without them it records the whole block.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from anydevice.shims.common import global_rank
from anydevice.shims.contracts import TraceSession

PERFETTO = "Perfetto (https://ui.perfetto.dev) or chrome://tracing"


class TorchProfilerSession(TraceSession):
    """A :class:`TraceSession` that forwards ``step()`` to the running ``torch.profiler``."""

    prof: Any = None

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()


def activities_for(names: Sequence[str]) -> list[ProfilerActivity]:
    """``ProfilerActivity`` members for the given names, skipping those this torch lacks."""
    found = [getattr(ProfilerActivity, n) for n in ("CPU", *names) if hasattr(ProfilerActivity, n)]
    return list(dict.fromkeys(found))


@contextmanager
def torch_profiler_trace(
    directory: Path,
    activities: Sequence[str] = (),
    *,
    experimental_config: Any = None,
    viewer: str = PERFETTO,
    tool: str = "torch.profiler",
    wait: int | None = None,
    warmup: int = 0,
    active: int | None = None,
    record_shapes: bool = False,
    with_stack: bool = False,
    profile_memory: bool = False,
) -> Iterator[TraceSession]:
    """Profile the enclosed block into ``directory``; yields the session whose ``files`` fill in on exit."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    session = TorchProfilerSession(directory=directory, viewer=viewer, tool=tool)
    stem = f"{socket.gethostname()}.rank{global_rank()}.pid{os.getpid()}.{time.time_ns()}"
    exports = 0

    def export(prof: Any) -> None:
        nonlocal exports
        path = directory / f"{stem}.{exports}.pt.trace.json"
        exports += 1
        prof.export_chrome_trace(str(path))
        session.files.append(path)

    scheduled = active is not None
    kwargs: dict[str, Any] = {
        "activities": activities_for(activities),
        "record_shapes": record_shapes,
        "with_stack": with_stack,
        "profile_memory": profile_memory,
    }
    if experimental_config is not None:
        kwargs["experimental_config"] = experimental_config
    if scheduled:
        kwargs["schedule"] = schedule(wait=wait or 0, warmup=warmup, active=active or 1, repeat=1)
        kwargs["on_trace_ready"] = export
    with profile(**kwargs) as prof:
        session.prof = prof
        try:
            yield session
        finally:
            session.prof = None
    if not scheduled:
        export(prof)
    existing = {p.resolve() for p in session.files}
    for extra in sorted(directory.rglob("*")):  # vendor configs may write more (xplane, ntff)
        if extra.is_file() and extra.resolve() not in existing and extra.stat().st_mtime_ns >= _start_ns(stem):
            session.files.append(extra)


def _start_ns(stem: str) -> int:
    return int(stem.rsplit(".", 1)[-1])
