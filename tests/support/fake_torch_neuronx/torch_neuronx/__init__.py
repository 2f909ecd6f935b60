"""FAKE torch_neuronx (tests only): the documented TorchNeuron surface, backed by the CPU.

Registers what native TorchNeuron (torch-neuronx >= 2.10) registers on import: the PrivateUse1
device renamed ``neuron`` with a ``torch.neuron`` module, the ``neuron`` process-group backend
(gloo underneath here) and the ``neuron`` torch.compile backend (runs the captured graph as is).
The SIMULATED device holds real tensors in host memory: a small C++ extension (``_device.cpp``,
built once per torch version, see :mod:`torch_neuronx._native`) registers its allocator, memory
kernels and a CPU fallback for every other op.
XLA-based versions (<= 2.9) register nothing on import, like the real ones before torch_xla runs.
``FAKE_NEURON_CORES`` (default 1) is the number of logical NeuronCores the fake reports.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import torch

FAKE = True
__version__ = metadata.version("torch-neuronx")
NATIVE = tuple(int(p) for p in __version__.split(".")[:2]) >= (2, 10)

calls: dict[str, int] = {"synchronize": 0, "set_device": 0, "memory_stats": 0}
_current = 0


class _NeuronModule:
    """What ``torch.neuron`` offers: device queries and synchronize (documented: torch.neuron.synchronize())."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return int(os.environ.get("FAKE_NEURON_CORES", "1"))

    @staticmethod
    def current_device() -> int:
        return _current

    @staticmethod
    def set_device(index: int) -> None:
        global _current
        calls["set_device"] += 1
        _current = index
        torch.ops.fake_neuron.set_device(index)  # the C++ device guard's current device

    @staticmethod
    def synchronize(device: Any = None) -> None:
        calls["synchronize"] += 1


def memory_stats() -> dict[str, int]:
    """Documented: device memory counters of the Neuron allocator (the SIMULATED host allocator's)."""
    calls["memory_stats"] += 1
    allocated, peak = torch.ops.fake_neuron.memory_stats()
    return {"allocated_bytes": allocated, "reserved_bytes": allocated, "peak_allocated_bytes": peak}


def _register() -> None:
    import types

    import torch.distributed as dist
    from torch._dynamo import register_backend
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    module = types.ModuleType("torch.neuron")
    for name in ("is_available", "device_count", "current_device", "set_device", "synchronize"):
        setattr(module, name, getattr(_NeuronModule, name))
    for name in ("is_initialized", "_is_in_bad_fork"):
        setattr(module, name, lambda: True if name == "is_initialized" else False)
    module.manual_seed_all = lambda seed: None  # type: ignore[attr-defined]
    module.get_amp_supported_dtype = lambda: [torch.bfloat16, torch.float16]  # type: ignore[attr-defined]
    module.get_rng_state = lambda device=None: torch.ByteTensor()  # type: ignore[attr-defined]
    # torch's own route for a Python-level PrivateUse1 backend: rename, device module, hooks, guard
    _setup_privateuseone_for_python_backend(rename="neuron", backend_module=module)
    from torch_neuronx import _native

    _native.load()  # SIMULATED device memory: allocator, copies, views, CPU fallback

    def _create_pg(store: Any, rank: int, size: int, timeout: Any) -> Any:
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    dist.Backend.register_backend("neuron", _create_pg, devices=["cpu"])

    @register_backend(name="neuron")  # type: ignore[misc]
    def _neuron_backend(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        _cache_graph(gm)
        return gm.forward


def _cache_graph(gm: torch.fx.GraphModule) -> None:
    """Stand-in for neuronx-cc's NEFF cache: one FAKE artifact per graph in TORCH_NEURONX_NEFF_CACHE_DIR."""
    import hashlib
    from pathlib import Path

    cache = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    if cache:
        digest = hashlib.sha256(gm.code.encode()).hexdigest()[:16]
        Path(cache).mkdir(parents=True, exist_ok=True)
        (Path(cache) / f"{digest}.neff").write_text("FAKE NEFF: the graph ran as is on the simulated device\n" + gm.code)


def _autoload() -> None:
    """The ``torch.backends`` entry point: importing the package is what registers it."""


if NATIVE and "neuron" not in getattr(torch._C, "_get_privateuse1_backend_name", lambda: "")():
    _register()
