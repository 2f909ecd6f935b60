"""anydevice: PyTorch on any accelerator by changing one environment variable.

    import anydevice as ad
    model = ad.to(model); model = ad.compile(model)
    ...; ad.step()

``ANYDEVICE`` selects the device (``cpu``, ``cuda``, ``tpu``, ``neuron``, ``xla``, ``mps``,
``xpu``, ``auto``, or a list such as ``tpu,cuda,cpu``). Importing this package imports neither
torch nor any vendor library; the selected plugin is loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from anydevice.errors import AnyDeviceError
from anydevice.release import VERSION

if TYPE_CHECKING:
    from anydevice import checkpoint, distributed, errors
    from anydevice.api import (
        autocast,
        backend,
        compile,  # noqa: A004 - mirrors torch.compile
        data_loader,
        device,
        device_map,
        device_module,
        fallback_ops,
        generator,
        load,
        manual_seed,
        memory_stats,
        profile,
        record,
        save,
        step,
        synchronize,
        to,
    )
    from anydevice.capability_query import Capabilities, capabilities
    from anydevice.edge import export
    from anydevice.meter import StepMeter, transformer_training_flops_per_token
    from anydevice.planner import checkpoint_blocks, plan
    from anydevice.preflight import check
    from anydevice.runtime.backend import Backend, reset, use

__version__ = VERSION

_HOME = {
    **dict.fromkeys(
        (
            "autocast",
            "backend",
            "compile",
            "data_loader",
            "device",
            "device_map",
            "device_module",
            "fallback_ops",
            "generator",
            "load",
            "manual_seed",
            "memory_stats",
            "profile",
            "record",
            "save",
            "step",
            "synchronize",
            "to",
        ),
        "anydevice.api",
    ),
    "Capabilities": "anydevice.capability_query",
    "capabilities": "anydevice.capability_query",
    "export": "anydevice.edge",
    "StepMeter": "anydevice.meter",
    "transformer_training_flops_per_token": "anydevice.meter",
    "check": "anydevice.preflight",
    "plan": "anydevice.planner",
    "checkpoint_blocks": "anydevice.planner",
    "Backend": "anydevice.runtime.backend",
    "reset": "anydevice.runtime.backend",
    "use": "anydevice.runtime.backend",
}
"""Where each public name lives: imported on first use, so that ``import anydevice`` (and every
``anydevice`` command, which imports this package first) pays only for what it uses."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        if name.startswith("_"):  # dunder probes (``__wrapped__``, ``__path__`` of tools) are never modules here
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        try:  # a module of the package (``ad.checkpoint``, ``ad.distributed``, ``ad.api``)
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(home)
    globals().update({public: getattr(module, public) for public, where in _HOME.items() if where == home})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AnyDeviceError",
    "Backend",
    "Capabilities",
    "StepMeter",
    "__version__",
    "autocast",
    "backend",
    "capabilities",
    "check",
    "checkpoint",
    "checkpoint_blocks",
    "compile",
    "data_loader",
    "device",
    "device_map",
    "device_module",
    "distributed",
    "errors",
    "export",
    "fallback_ops",
    "generator",
    "load",
    "manual_seed",
    "memory_stats",
    "plan",
    "profile",
    "record",
    "reset",
    "save",
    "step",
    "synchronize",
    "to",
    "transformer_training_flops_per_token",
    "use",
]
