"""``ad.capabilities()``: what the selected device computes in and how it compiles, communicates and stores.

From the plugin's :class:`~anydevice.contract.check_facts.CheckFacts` declaration and, where torch has it (2.15:
``torch.accelerator.get_device_capability()["supported_dtypes"]``), from torch itself on the device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from anydevice.contract.check_facts import FP8

TORCH_CAPABILITY = "torch.accelerator.get_device_capability()"


@dataclass(frozen=True)
class Capabilities:
    """The selected device's capabilities; None where a fact is unknown (never guessed).

    :param device: the anydevice device name.
    :param chip: the chip, where known.
    :param dtypes: dtype names the device computes in (``float32``, ``bfloat16``, ``float8_e4m3fn``...).
    :param bf16: whether ``torch.bfloat16`` is supported.
    :param fp8: the fp8 variants supported.
    :param compile_backends: ``torch.compile`` backends for the device, ``ad.compile``'s first.
    :param collectives_backend: the ``torch.distributed`` backend.
    :param memory_per_chip: bytes of device memory per chip (the chip's, from the plugin's table).
    :param static_shapes: True when every new input shape is a new compile.
    :param sources: where each fact came from.
    :param evidence: what stands behind the plugin (``DeviceSpec.evidence.as_dict()``: level, source, date, label).
    """

    device: str
    chip: str | None
    dtypes: tuple[str, ...] | None
    bf16: bool | None
    fp8: tuple[str, ...] | None
    compile_backends: tuple[str, ...]
    collectives_backend: str
    memory_per_chip: int | None
    static_shapes: bool
    sources: tuple[str, ...]
    evidence: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (``anydevice info --json``)."""
        return asdict(self)


def torch_supported_dtypes(device_type: str) -> frozenset[str] | None:
    """``torch.accelerator.get_device_capability()["supported_dtypes"]`` as names (torch 2.15+ on that device), or None."""
    import torch

    from anydevice.shims.contracts import accelerator_matches

    query = getattr(getattr(torch, "accelerator", None), "get_device_capability", None)
    if query is None or not accelerator_matches(device_type):
        return None
    found = query().get("supported_dtypes")
    return frozenset(str(dt).removeprefix("torch.") for dt in found) if found else None


def capabilities() -> Capabilities:
    """What the selected device supports: dtypes (bf16, fp8), compile backends, collectives, memory, shapes."""
    from anydevice.runtime.backend import current
    from anydevice.runtime.registry import get_registry

    b = current()
    facts = get_registry().get(b.name).spec.check
    sources = [f"the {b.name} plugin's declaration" + (f" ({', '.join(facts.sources)})" if facts.sources else "")]
    dtypes = facts.dtypes
    from_torch = torch_supported_dtypes(b.device_type)
    if from_torch is not None:
        dtypes = from_torch if dtypes is None else dtypes & from_torch
        sources.append(TORCH_CAPABILITY)
    backends = (b.shims.compilation.backend, *(x for x in facts.compile_backends if x != b.shims.compilation.backend))
    memory = facts.memory_per_chip.get(b.chip or "") if b.chip else None
    return Capabilities(
        device=b.name,
        chip=b.chip,
        dtypes=tuple(sorted(dtypes)) if dtypes is not None else None,
        bf16=("bfloat16" in dtypes) if dtypes is not None else None,
        fp8=tuple(sorted(dtypes & FP8)) if dtypes is not None else None,
        compile_backends=backends,
        collectives_backend=b.shims.collectives.backend,
        memory_per_chip=memory,
        static_shapes=facts.static_shapes,
        sources=tuple(sources),
        evidence=b.evidence.as_dict(),
    )


def render(caps: dict[str, Any]) -> str:
    """The lines ``anydevice info`` prints for :meth:`Capabilities.as_dict`."""
    dtypes = ", ".join(caps["dtypes"]) if caps["dtypes"] is not None else "unknown"
    memory = f"{caps['memory_per_chip'] / 2**30:.0f} GiB per chip" if caps["memory_per_chip"] else "unknown per chip"
    shapes = "static (each new shape compiles)" if caps["static_shapes"] else "dynamic"
    return (
        f"dtypes     {dtypes}\n"
        f"memory     {memory}    shapes {shapes}    compile backends {', '.join(caps['compile_backends'])}\n"
        f"sources    {'; '.join(caps['sources'])}\n"
        f"evidence   {caps['evidence']['label']}"
    )
