"""Classes that stand in for ``torch.cuda``'s on a device without CUDA streams: types stay types.

``torch.cuda.Event``, ``Stream``, ``StreamContext``, ``device``, ``device_of`` and the legacy
``torch.cuda.FloatTensor``-style types are replaced by classes (never functions), so ``isinstance``
and subclassing keep working, and each pickles as the real class
(:mod:`.stand_ins`). Work on cpu and XLA runs in issue order on one queue, so a stream is
that queue: ``wait_stream`` and ``wait_event`` have nothing to wait for, ``synchronize`` waits for
the device. An event records the host clock after the device has finished the work issued so far,
so ``start.elapsed_time(end)`` is the wall time of the region in milliseconds, as CUDA events give.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from anydevice.cuda_compat.stand_ins import StandInType, picklable
from anydevice.errors import UnsupportedDeviceFunctionError


class HostQueue:
    """What the stand-ins need from the device: its name, ``synchronize`` and its device index functions."""

    def __init__(self, name: str, synchronize: Callable[[], None], set_device: Callable[[Any], None], current: Callable[[], int]):
        self.name = name
        self.synchronize = synchronize
        self.set_device = set_device
        self.current = current


def host_types(queue: HostQueue) -> dict[str, type]:
    """``torch.cuda`` class name -> the stand-in class for ``queue``'s device."""

    class Stream(metaclass=StandInType):
        """The device's one in-order queue (``torch.cuda.Stream`` on a device without streams)."""

        def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
            self.device = device
            self.priority = priority

        def wait_event(self, event: Any) -> None:
            """Nothing to wait for: one queue runs in issue order."""

        def wait_stream(self, stream: Any) -> None:
            """Nothing to wait for: one queue runs in issue order."""

        def record_event(self, event: Any = None) -> Any:
            event = event if event is not None else Event()
            event.record(self)
            return event

        def query(self) -> bool:
            queue.synchronize()
            return True

        def synchronize(self) -> None:
            queue.synchronize()

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Stream)

        def __hash__(self) -> int:
            return hash(queue.name)

        def __repr__(self) -> str:
            return f"<anydevice cuda-compat stream on {queue.name}>"

    class ExternalStream(Stream):
        """``torch.cuda.ExternalStream``: the same single queue."""

    class Event(metaclass=StandInType):
        """``torch.cuda.Event``: the host clock once the device has finished the work issued before ``record``."""

        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
            self.enable_timing = enable_timing
            self.time: float | None = None

        def record(self, stream: Any = None) -> None:
            queue.synchronize()
            self.time = time.perf_counter()

        def wait(self, stream: Any = None) -> None:
            """Nothing to wait for: one queue runs in issue order."""

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            """Recorded events are complete: ``record`` waited for the device."""

        def elapsed_time(self, end_event: Event) -> float:
            """Milliseconds from this event to ``end_event``."""
            if self.time is None or end_event.time is None:
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            return (end_event.time - self.time) * 1000.0

        def __repr__(self) -> str:
            return f"<anydevice cuda-compat event on {queue.name}>"

    class StreamContext(metaclass=StandInType):
        """``with torch.cuda.stream(s):``: the single queue is always current."""

        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            return None

    class device(metaclass=StandInType):
        """``with torch.cuda.device(i):``: ``i`` is the current device inside the block."""

        def __init__(self, device: Any) -> None:
            self.idx = device
            self.prev: int | None = None

        def __enter__(self) -> None:
            if self.idx is not None and not (isinstance(self.idx, int) and self.idx < 0):
                self.prev = queue.current()
                queue.set_device(self.idx)

        def __exit__(self, *exc: object) -> None:
            if self.prev is not None:
                queue.set_device(self.prev)

    class device_of(device):
        """``with torch.cuda.device_of(tensor):``: the tensor's device index is current inside the block."""

        def __init__(self, obj: Any) -> None:
            index = getattr(getattr(obj, "device", None), "index", None)
            super().__init__(index)

    return {
        "Stream": Stream,
        "ExternalStream": ExternalStream,
        "Event": Event,
        "StreamContext": StreamContext,
        "device": device,
        "device_of": device_of,
    }


@picklable
class _LegacyTensorType(StandInType):
    """Metaclass of the ``torch.cuda.FloatTensor``-style stand-ins: build on the selected device, check by dtype."""

    cpu_type: Any
    target: torch.device

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.cpu_type.dtype and obj.device.type == cls.target.type

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.cpu_type(*args, **kwargs).to(cls.target)


LEGACY_TENSORS = (
    "BFloat16Tensor", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor", "FloatTensor", "HalfTensor",
    "IntTensor", "LongTensor", "ShortTensor",
)  # fmt: skip


def legacy_tensor_types(target: torch.device) -> dict[str, type]:
    """``torch.cuda.FloatTensor`` & co.: classes that build the same tensor on ``target``."""
    made: dict[str, type] = {}
    for name in LEGACY_TENSORS:
        cpu_type = getattr(torch, name)
        made[name] = _LegacyTensorType(name, (), {"cpu_type": cpu_type, "target": target, "__module__": "torch.cuda"})
    return made


def refused_type(name: str, device: str, reason: str) -> type:
    """A class whose construction raises :class:`UnsupportedDeviceFunctionError` (``isinstance`` is False)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedDeviceFunctionError(f"torch.cuda.{name}", device, reason)

    return StandInType(name, (), {"__init__": __init__, "__module__": "torch.cuda"})
