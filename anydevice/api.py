"""The public functions: device placement, compile, step, autocast, RNG, memory, data, save/load, profile.

Each one asks the selected backend's shims; torch is imported only when one is called.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from anydevice.errors import UnsupportedDeviceFunctionError, UnsupportedFeatureError
from anydevice.runtime import strict
from anydevice.runtime.backend import Backend, current, mark_used

if TYPE_CHECKING:
    import torch

    from anydevice.shims.contracts import MemoryStats, TraceSession

T = TypeVar("T")

_step_listeners: list[Callable[[], None]] = []


def backend() -> Backend:
    """What was selected: name, plugin, device type, chip, count, versions and why."""
    return current()


def device(role: str | None = None) -> torch.device:
    """The ``torch.device`` for this process (the explicit index, else the local rank's).

    ``role``: the device of that role (``ANYDEVICE_ROLES``, e.g. ``trainer=xla,rollout=cpu``); a role
    without an entry follows ``ANYDEVICE``. A role on another device is loaded beside the process's own.
    """
    if role is not None:
        from anydevice.runtime.roles import backend_for

        rb = backend_for(role)
        mark_used(f"ad.device({role!r})")  # use() refuses to switch under a role's device too
        return rb.shims.placement.device(rb.index)
    b = current()
    mark_used("ad.device()")  # from here on, use() refuses to switch device (see backend.use)
    return b.shims.placement.device(b.index)


def to(obj: T, non_blocking: bool = False) -> T:
    """Move tensors, modules and nested containers of them to :func:`device`."""
    b = current()
    mark_used("ad.to()")
    return b.shims.placement.move(obj, non_blocking)


def compile(model: T, **options: Any) -> T:  # noqa: A001 - mirrors torch.compile
    """``torch.compile`` with this device's backend and options (``backend=`` overrides)."""
    b = current()
    mark_used("ad.compile()")
    return b.shims.compilation.compile(model, **options)


def step(role: str | None = None) -> None:
    """Mark the end of a training step: XLA sync on lazy devices; advances profilers and meters.

    ``role``: the step of that role's device (``ANYDEVICE_ROLES``) when it is not this process's own.
    """
    if role is not None:
        from anydevice.runtime.roles import backend_for

        rb = backend_for(role)
        if rb is not current():
            rb.shims.placement.step()
            _notify_step_listeners()
            return
    b = current()
    b.shims.placement.step()
    if strict.enabled():
        strict.after_step(b)  # the runtime's host-side fallback counters; no device value is read
    _notify_step_listeners()


def _notify_step_listeners() -> None:
    for listener in list(_step_listeners):
        listener()


def synchronize() -> None:
    """Wait for queued device work to finish."""
    current().shims.placement.synchronize()


def autocast(dtype: torch.dtype | None = None, enabled: bool = True) -> AbstractContextManager[Any]:
    """``torch.autocast`` for this device with its preferred low-precision dtype."""
    return current().shims.placement.autocast(dtype, enabled)


def manual_seed(seed: int) -> None:
    """Seed Python's, torch's and the device's RNGs."""
    current().shims.placement.manual_seed(seed)


def generator(seed: int) -> torch.Generator:
    """A seeded ``torch.Generator`` for this device's random draws (e.g. diffusers' ``generator=``).

    On the device where it has generators (cpu, cuda, xpu, mps); on lazy XLA devices, which have
    none (``torch.Generator(device="xla:0")`` raises), a CPU generator: draw on the CPU and move the
    result, ``torch.randn(shape, generator=g).to(ad.device())``, which is what diffusers'
    ``randn_tensor`` does when handed a CPU generator. Same seed, same numbers on every device.
    """
    return current().shims.placement.generator(seed)


def memory_stats() -> MemoryStats:
    """Device memory counters in bytes; empty, with ``.reason``, where the runtime has none."""
    return current().shims.placement.memory_stats()


def data_loader(loader: Iterable[T]) -> Iterable[T]:
    """Wrap a loader so batches arrive on the device, prefetched the device's way."""
    return current().shims.placement.data_loader(loader)


def save(obj: Any, path: str | Path) -> None:
    """Save portably: tensors moved to CPU, written once by the main rank, atomically.

    With a process group up it is collective (call it on every rank): it returns on every rank
    only once the file is in place, so ``ad.save(...); ad.load(...)`` works on every rank of a
    shared filesystem, and raises on every rank when rank 0 failed. Only an earlier checkpoint
    file is replaced; any other file, a read-only one, a full disk or another user's symlink in a
    shared directory raises :class:`~anydevice.errors.CheckpointError` naming the file and the cause.
    """
    from anydevice.checkpoint.saving import save as save_file

    save_file(obj, Path(path))


def load(path: str | Path, map_location: str | torch.device = "cpu", weights_only: bool = True) -> Any:
    """Load what :func:`save` wrote; tensors land on ``map_location`` (CPU by default).

    Every member's CRC-32 is checked first: an empty, truncated or corrupt file raises
    :class:`~anydevice.errors.CheckpointError` naming it and what is wrong.
    """
    from anydevice.checkpoint.loading import load_file

    return load_file(Path(path), map_location=map_location, weights_only=weights_only)


def add_step_listener(listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener`` after every :func:`step`; returns a function that removes it."""
    _step_listeners.append(listener)
    return lambda: _step_listeners.remove(listener) if listener in _step_listeners else None


_active_profile: TraceSession | None = None


@contextmanager
def profile(directory: str | Path, **options: Any) -> Iterator[TraceSession]:
    """Trace the enclosed code with the device's profiler into ``directory``.

    Options: ``active`` steps to record, after ``wait`` skipped and ``warmup`` discarded steps
    (a schedule advanced by :func:`step`; without ``active`` the whole block is recorded),
    ``record_shapes``, ``with_stack``, ``profile_memory``. On exit the session's ``files`` lists
    what was written, ``viewer`` the tool that opens them and ``tool`` the profiler used; one
    line on stderr says the same (``ANYDEVICE_QUIET=1`` silences it). One trace at a time.
    """
    global _active_profile
    if _active_profile is not None:
        raise UnsupportedFeatureError(
            f"A profile is already being recorded into {_active_profile.directory}.",
            "Vendors' profilers record one trace at a time: end the running `ad.profile` block first.",
        )
    steps = 0

    def count() -> None:
        nonlocal steps
        steps += 1

    trace = current().shims.profiling.trace(Path(directory), **options)
    with trace as session:
        _active_profile = session
        remove_step, remove_count = add_step_listener(session.step), add_step_listener(count)
        try:
            yield session
        finally:
            remove_step(), remove_count()
            _active_profile = None
    _report_profile(session, steps, options)


def _report_profile(session: TraceSession, steps: int, options: dict[str, Any]) -> None:
    from anydevice import settings

    if settings.ANYDEVICE_QUIET.flag():
        return
    if session.files:
        line = f"{len(session.files)} file(s) in {session.directory} from {session.tool}; open with {session.viewer}"
    else:
        needed = sum(int(options.get(k) or 0) for k in ("wait", "warmup", "active"))
        line = f"no trace written to {session.directory}"
        if needed:
            line += f": the schedule needs {needed} ad.step() calls, the block made {steps}"
    sys.stderr.write(f"anydevice: profile: {line}\n")


@contextmanager
def record(name: str) -> Iterator[None]:
    """Annotate a region so it shows by ``name`` in the device's trace (every vendor's profiler)."""
    with current().shims.profiling.record(name):
        yield


def device_module() -> Any:
    """A ``torch.cuda``-shaped module for the selected device (``torch.cuda`` itself on cuda).

    Frameworks written against ``torch.cuda`` call a handful of functions on it (the surface is
    ``anydevice.shims.cuda_shaped.SURFACE``); what the device lacks raises
    :class:`~anydevice.errors.UnsupportedDeviceFunctionError`. The same object is returned on every call.
    """
    from anydevice.shims.contracts import CudaShaped

    shim = current().shims.capability(CudaShaped)  # type: ignore[type-abstract]  # looked up, never built
    if shim is None:
        raise UnsupportedDeviceFunctionError("device_module", current().name, "its plugin offers no torch.cuda-shaped module")
    return shim.device_module()


def device_map() -> dict[str, str]:
    """What ``from_pretrained(device_map=...)`` needs for this process: ``{"": "<this process's device>"}``.

    ``device_map="auto"`` asks Accelerate, which does not know every device (under torch_xla it
    places the model on the CPU); this names :func:`device`, local-rank aware.
    """
    return {"": str(device())}


def fallback_ops() -> dict[str, int]:
    """Ops that ran on the CPU instead of the device so far in this process: ``{"aten::name": count}``.

    Empty where the device falls back on nothing it can count (eager devices run every op natively
    or raise). On torch_xla these are its ``aten::`` metric counters (e.g. ``upsample_nearest2d_backward``).
    """
    from anydevice.shims.contracts import Diagnostics

    diagnostics = current().shims.capability(Diagnostics)
    return dict(diagnostics.fallback_ops()) if diagnostics is not None else {}
