"""A trace session over ``torch.profiler`` for eager devices (cpu, cuda, xpu, mps, native tpu/neuron).

Writes Chrome-trace JSON (opens in Perfetto or chrome://tracing). A vendor's
``experimental_config`` (TorchTPU's ``TpuProfilerConfig``, Neuron's ``NeuronConfig``) may write
more files (``.xplane.pb``, ``.ntff``); they are listed too, with the tool that opens them.
With ``active`` (and optionally ``wait``/``warmup``) the profiler follows a schedule advanced
by ``ad.step()``; without it the whole block is recorded.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.profiler import ProfilerActivity, profile, record_function, schedule

from anydevice.settings import rank
from anydevice.shims.trace_session import TraceSession

PERFETTO = "Perfetto (https://ui.perfetto.dev) or chrome://tracing"
TRACE_SUFFIX = ".pt.trace.json"
# file suffix -> the tool that opens it
VIEWERS: dict[str, str] = {
    ".trace.json": PERFETTO,
    ".trace.json.gz": PERFETTO,
    ".xplane.pb": "TensorBoard with tensorboard-plugin-profile, or XProf (xprof --logdir DIR)",
    ".ntff": "Neuron Profiler (neuron-profile view)",
}


def viewers_for(files: Iterable[Path], default: str = PERFETTO) -> str:
    """The tools that open ``files``, joined by '; ' (``default`` when none is recognised)."""
    found = [viewer for suffix, viewer in VIEWERS.items() if any(f.name.endswith(suffix) for f in files)]
    return "; ".join(dict.fromkeys(found)) or default


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
    warmup: int | None = None,
    active: int | None = None,
    record_shapes: bool = False,
    with_stack: bool = False,
    profile_memory: bool = False,
) -> Iterator[TraceSession]:
    """Profile the enclosed block into ``directory``; yields the session whose ``files`` fill in on exit."""
    if active is None and (wait or warmup):
        raise ValueError("A profiler schedule needs active=N (the steps to record) besides wait/warmup.")
    if active is not None and active < 1:
        raise ValueError(f"active must be at least 1, not {active}.")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    session = TorchProfilerSession(directory=directory, viewer=viewer, tool=tool)
    started_ns = time.time_ns()
    stem = f"{socket.gethostname()}.rank{rank()}.pid{os.getpid()}.{started_ns}"
    exports = 0

    def export(prof: Any) -> None:
        nonlocal exports
        path = directory / f"{stem}.{exports}{TRACE_SUFFIX}"
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
        kwargs["schedule"] = _schedule(wait or 0, warmup, active or 1)
        kwargs["on_trace_ready"] = export
    with profile(**kwargs) as prof:
        session.prof = prof
        try:
            yield session
        finally:
            session.prof = None
    if not scheduled:
        export(prof)
    session.files.extend(_vendor_files(directory, session.files, started_ns))
    session.viewer = viewers_for(session.files, viewer)


def _schedule(wait: int, warmup: int | None, active: int) -> Any:
    """One wait/warmup/active cycle. Unless told, one of the waiting steps warms the profiler up
    (the same number of steps, fewer skewed events); with nothing to wait, there is no warm-up."""
    if warmup is None:
        warmup, wait = (1, wait - 1) if wait > 0 else (0, 0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Profiler won't be using warmup", UserWarning)  # a warm-up of 0 is asked for
        return schedule(wait=wait, warmup=warmup, active=active, repeat=1)


def _vendor_files(directory: Path, ours: list[Path], started_ns: int) -> list[Path]:
    """Files a vendor's ``experimental_config`` wrote during the session (TPU ``.xplane.pb``, Neuron ``.ntff``).

    Chrome traces of other processes sharing the directory (other ranks) are not ours to list.
    """
    known = {p.resolve() for p in ours}
    return [
        extra
        for extra in sorted(directory.rglob("*"))
        if extra.is_file()
        and extra.resolve() not in known
        and not extra.name.endswith(TRACE_SUFFIX)
        and extra.stat().st_mtime_ns >= started_ns
    ]


@contextmanager
def record(name: str) -> Iterator[None]:
    """Annotate a region by ``name`` in the running ``torch.profiler`` trace (cheap when none runs)."""
    with record_function(name):
        yield
