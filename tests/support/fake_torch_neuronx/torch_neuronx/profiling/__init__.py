"""FAKE torch_neuronx.profiling (tests only): ``NeuronConfig`` for torch.profiler's experimental_config."""

from __future__ import annotations

import enum
from typing import Any

import torch


class ProfileMode(enum.Enum):
    """Documented capture modes."""

    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(torch.profiler._ExperimentalConfig):  # type: ignore[misc]
    """Documented: extends torch.profiler with Neuron capture modes (fake: records its arguments)."""

    def __init__(self, modes: list[ProfileMode] | None = None, **options: Any) -> None:
        super().__init__()
        self.modes = modes or [ProfileMode.RUNTIME]
        self.options = options
