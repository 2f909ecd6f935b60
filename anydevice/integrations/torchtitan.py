"""torchtitan on the selected device, without editing torchtitan's files.

    python -m anydevice.integrations.torchtitan --module llama3 --config llama3_debugmodel [torchtitan flags]

or, in a script of your own (before torchtitan builds its ``Trainer``)::

    from anydevice.integrations.torchtitan import patch
    patch()

torchtitan picks its device once, at import, in ``torchtitan/tools/utils.py``:
``device_type = _get_available_device_type() or "cuda"`` and ``device_module =
_get_device_module(device_type)``; several modules copy both names at import
(``from torchtitan.tools.utils import device_module, device_type``: components/metrics.py,
distributed/utils.py, distributed/parallel_dims.py, models/common/token_dispatcher.py,
tools/profiler.py), and the trainer calls ``set_device``, ``current_device``,
``synchronize``, ``get_device_name``, ``get_device_properties``, ``memory_stats``,
``reset_peak_memory_stats`` and ``empty_cache`` through ``device_module``.

:func:`patch` rebinds ``device_type`` to ``ad.device().type`` and ``device_module`` to
``ad.device_module()`` (the ``torch.cuda``-shaped module of the selected device) in
``torchtitan.tools.utils`` and in every torchtitan module that copied them. Until
``ad.device_module`` exists in this build, ``torch.get_device_module(device_type)`` stands in
(said in the log line and in :attr:`Patched.module_source`). Where that module cannot give
torchtitan's memory monitor what it reads (torch's CPU module has no ``get_device_name`` nor
``memory_stats``), the monitor is replaced by one that reads :func:`anydevice.memory_stats`
and logs once why its numbers are -1 (torchtitan's own value for "unknown").

Importing this module imports neither torch nor torchtitan.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("anydevice.integrations.torchtitan")

COPIES = (
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.models.common.token_dispatcher",
    "torchtitan.tools.profiler",
)
"""torchtitan modules that copy ``device_type`` / ``device_module`` from torchtitan.tools.utils at import."""

MONITOR_NEEDS = (
    "get_device_name",
    "current_device",
    "get_device_properties",
    "memory_stats",
    "reset_peak_memory_stats",
    "empty_cache",
)
"""What torchtitan's ``DeviceMemoryMonitor`` calls on the device module."""


@dataclass
class Patched:
    """What :func:`patch` changed: the device, where its module came from, and the modules rebound."""

    device_type: str
    module_source: str
    was: tuple[str, str]
    modules: list[str] = field(default_factory=list)
    memory_monitor: str = "torchtitan's DeviceMemoryMonitor"


def device_module() -> tuple[Any, str]:
    """The selected device's ``torch.cuda``-shaped module and where it came from."""
    import anydevice as ad

    factory = getattr(ad, "device_module", None)
    if callable(factory):
        return factory(), "anydevice.device_module()"
    import torch

    kind = ad.device().type
    return torch.get_device_module(kind), f"torch.get_device_module({kind!r}) (this anydevice has no device_module())"


def patch() -> Patched:
    """Point torchtitan's device globals at anydevice's selection (call before building a Trainer)."""
    import anydevice as ad

    utils = importlib.import_module("torchtitan.tools.utils")
    old_type, old_module = utils.device_type, utils.device_module
    kind = ad.device().type
    module, source = device_module()
    done = Patched(kind, source, (str(old_type), getattr(old_module, "__name__", repr(old_module))))
    utils.device_type, utils.device_module = kind, module
    utils.get_device_info = lambda: (kind, module)
    for name in COPIES:
        importlib.import_module(name)
    for name, mod in list(sys.modules.items()):
        if not name.startswith("torchtitan") or mod is None:
            continue
        rebound = False
        if getattr(mod, "device_type", None) is old_type and isinstance(old_type, str):
            mod.device_type = kind
            rebound = True
        if getattr(mod, "device_module", None) is old_module:
            mod.device_module = module
            rebound = True
        if rebound:
            done.modules.append(name)
    missing = [f for f in MONITOR_NEEDS if not callable(getattr(module, f, None))]
    if missing or not _memory_stats_work(module):
        _replace_memory_monitor(kind, missing)
        done.memory_monitor = "anydevice.memory_stats()"
    log.info(
        "torchtitan: device %s (was %s); device_module from %s; rebound in %d modules; memory from %s",
        kind,
        old_type,
        source,
        len(done.modules),
        done.memory_monitor,
    )
    return done


def _memory_stats_work(module: Any) -> bool:
    try:
        module.memory_stats()
        return True
    except Exception:
        return False


def _replace_memory_monitor(kind: str, missing: list[str]) -> None:
    """Swap torchtitan's memory monitor for one that reads ``ad.memory_stats()`` (-1 where unknown)."""
    import anydevice as ad

    metrics = importlib.import_module("torchtitan.components.metrics")
    base = metrics.DeviceMemoryMonitor
    why = f"device module lacks {', '.join(missing)}" if missing else "its memory_stats() fails"

    class AnyDeviceMemoryMonitor(base):  # type: ignore[misc, valid-type]
        """torchtitan's monitor on ``ad.memory_stats()``: byte counters where the device keeps them, else -1."""

        def __init__(self, device: str = kind) -> None:
            import torch

            self.device = torch.device(device)
            self.device_name = ad.backend().chip or kind
            self.device_index = self.device.index or 0
            stats = ad.memory_stats()
            self.device_capacity = int(stats.get("total_bytes", stats.get("limit_bytes", 0))) or -1
            self.device_capacity_gib = self._to_gib(self.device_capacity)
            if not stats:
                log.warning("torchtitan: %s memory numbers are -1: %s (%s)", kind, stats.reason, why)

        def _to_pct(self, memory: float) -> float:
            return 100 * memory / self.device_capacity if self.device_capacity > 0 else -1.0

        def get_peak_stats(self) -> Any:
            stats = ad.memory_stats()
            active = stats.get("peak_allocated_bytes", -1)
            reserved = stats.get("peak_reserved_bytes", -1)
            return metrics.DeviceMemStats(
                self._to_gib(active),
                self._to_pct(active),
                self._to_gib(reserved),
                self._to_pct(reserved),
                stats.get("num_alloc_retries", -1),
                stats.get("num_ooms", -1),
            )

        def reset_peak_stats(self) -> None:
            pass  # ad.memory_stats() has no reset; peaks are since the process started

    def build() -> Any:
        monitor = AnyDeviceMemoryMonitor(kind)
        log.info("%s capacity: %s (from anydevice.memory_stats)", kind.upper(), monitor.device_name)
        return monitor

    metrics.DeviceMemoryMonitor = AnyDeviceMemoryMonitor
    metrics.build_device_memory_monitor = build


def run(argv: Sequence[str] | None = None) -> None:
    """Patch, then run torchtitan's own entry point (``torchtitan.train.main``) with ``argv``.

    A process started without a launcher gets torchrun's single-process variables
    (``RANK=0``, ``LOCAL_RANK=0``, ``WORLD_SIZE=1``, ``MASTER_ADDR=127.0.0.1``, a free
    ``MASTER_PORT``); under ``anydevice run -n N`` or torchrun the launcher's are kept.
    """
    if "LOCAL_RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    logging.basicConfig(level=logging.INFO)
    patch()
    train = importlib.import_module("torchtitan.train")
    saved = sys.argv
    sys.argv = ["torchtitan.train", *(sys.argv[1:] if argv is None else argv)]
    try:
        train.main()
    finally:
        sys.argv = saved


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    run()
