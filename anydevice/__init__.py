"""anydevice: PyTorch on any accelerator by changing one environment variable.

    import anydevice as ad
    model = ad.to(model); model = ad.compile(model)
    ...; ad.step()

``ANYDEVICE`` selects the device (``cpu``, ``cuda``, ``tpu``, ``neuron``, ``xla``, ``mps``,
``xpu``, ``auto``, or a list such as ``tpu,cuda,cpu``). Importing this package imports neither
torch nor any vendor library; the selected plugin is loaded on first use.
"""

from __future__ import annotations

from anydevice import (
    checkpoint,
    distributed,
    errors,
    old_paths,  # noqa: F401  (serves 0.3's import paths, deprecated)
)
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
from anydevice.capabilities import Capabilities, capabilities
from anydevice.edge import export
from anydevice.errors import AnyDeviceError
from anydevice.meter import StepMeter, transformer_training_flops_per_token
from anydevice.preflight import check
from anydevice.release import VERSION
from anydevice.runtime.backend import Backend, reset, use

__version__ = VERSION

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
