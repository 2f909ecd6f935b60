"""What ``anydevice launch --target`` asks a cluster for: hosts, chips and processes per host, read from the chips catalogue.

    tpu:v5e-16        a TPU slice as Cloud writes it: 4 hosts of 4 chips, topology 4x4 (one host: tpu:v5e-8)
    cuda:h100x8       one host of 8 GPUs; cuda:h100x8x2: two such hosts
    neuron:trn2-16    one trn2.48xlarge (16 Trainium2 chips, 64 NeuronCores at LNC=2); neuron:trn2-16x2: two
    cpu               one host, one process (a rehearsal); cpu:2x3: 2 processes on each of 3 hosts

The device, chip and count are read by the one device grammar (:func:`anydevice.runtime.selection.parse_ref`,
which refuses a shape the chip does not come in, a zero count or a Unicode digit with the valid choices); launch
adds only how many hosts. Chips per host, hosts per slice, topology, devices per chip and Cloud's accelerator type
come from the device's chips catalogue (``DeviceSpec.chips``), never from a table here. Imports neither torch nor a
vendor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anydevice.errors import SelectionError

if TYPE_CHECKING:
    from anydevice.runtime.registry import Registry

_ON_HOSTS = re.compile(r"(.+:.*[-x][0-9]+)x([0-9]+)", flags=re.ASCII)
"""``cuda:h100x8x2``: a host's shape, then how many such hosts."""
_HOSTS = re.compile(r"([0-9]+)x([0-9]+)", flags=re.ASCII)
MAX_HOSTS = 4096
"""More hosts than this in one job is refused as a typo (the largest TPU pods have a few thousand hosts)."""


@dataclass(frozen=True)
class Target:
    """One launch target, resolved: what each host runs and what the cluster must provide.

    :param text: the canonical spelling (``tpu:v5e-16``).
    :param device: the registry's device name (``ANYDEVICE`` on every host).
    :param chip: the chip's catalogue name (``v5e``), None for cpu.
    :param model: the chip's model (``TPU v5e``, ``H100``), None for cpu.
    :param hosts: machines in the job (a TPU slice's hosts, or the ``xN`` suffix).
    :param chips_per_host: chips each host holds (0 for cpu).
    :param processes: ``anydevice run -n`` on each host: chips times the runtime's devices per chip.
    :param topology: the slice's dimensions (``4x4``), None where the vendor names none.
    :param compiler_topology: the compiler's topology name (``v5e:4x4``), None where there is none.
    :param accelerator_type: Cloud's accelerator type (``v5litepod-16``), None where there is none.
    :param slice: True for a TPU-style slice whose hosts are one interconnected unit (asked for as one).
    :param resource: the Kubernetes extended resource the chips are counted in (``google.com/tpu``), as the plugin
        declares it; None where there is none (cpu).
    :param source: where the chip's facts come from (the catalogue's source and date).
    :param chip_facts: the catalogue entry itself, for emitters that read one more declared fact.
    """

    text: str
    device: str
    chip: str | None
    model: str | None
    hosts: int
    chips_per_host: int
    processes: int
    topology: str | None = None
    compiler_topology: str | None = None
    accelerator_type: str | None = None
    slice: bool = False
    resource: str | None = None
    source: str = "declared"
    chip_facts: Any = None

    @property
    def chips(self) -> int:
        """Chips in the whole job."""
        return self.hosts * self.chips_per_host

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


def parse_target(text: str, registry: Registry | None = None) -> Target:
    """``"tpu:v5e-16"`` -> :class:`Target`; an unknown device, chip or shape raises :class:`SelectionError` with the choices.

    The device and chip are read by the one device grammar (:func:`anydevice.runtime.selection.parse_ref`); launch
    adds only the hosts: ``xN`` after a host's shape, or ``PxH`` for a device without chips.
    """
    from anydevice.contract import chips as catalogue
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import parse_ref

    registry = registry or get_registry()
    hosts_match = _ON_HOSTS.fullmatch(text)
    base, nodes_text = (hosts_match[1], hosts_match[2]) if hosts_match else (text, None)
    name, _, variant = text.partition(":")
    if variant and _HOSTS.fullmatch(variant):  # cpu:1x2: a device without chips, P processes on H hosts
        ref = parse_ref(name, registry)
        if ref.spec.chips:
            raise SelectionError(
                f"--target {text}: {ref.name} names a chip and a count.",
                f"Choose one of: {catalogue.valid_list(ref.name, ref.spec.chips, 6)}.",
            )
        return _host_only(ref.name, variant, text)
    try:
        ref = parse_ref(base, registry)
    except SelectionError as exc:  # the part before the hosts: the error names what the user wrote too
        if base == text:
            raise
        raise SelectionError(f"--target {catalogue.shown(text)}: {exc.message}", exc.hint) from None
    chip, shape = ref.chip, ref.shape
    if ref.index is not None and not ref.spec.chips:
        raise SelectionError(
            f"--target {text}: {ref.name}:{ref.index} is a device index, not a launch target.",
            f"Write {ref.name}, or {ref.name}:PROCESSESxHOSTS (e.g. {ref.name}:1x2: one process on each of two hosts).",
        )
    if ref.index is not None or (ref.spec.chips and (chip is None or shape is None)):
        raise SelectionError(
            f"--target {text}: a launch target names a chip and a count, or a slice.",
            f"Choose one of: {catalogue.valid_list(ref.name, ref.spec.chips, 6) or ref.name}.",
        )
    if chip is None or shape is None:
        return _host_only(ref.name, "", text)
    topology = chip.topology_name(shape)
    is_slice = topology is not None
    hosts = shape.hosts * _nodes(nodes_text, text, is_slice, ref.name, chip.name, ref.count or 0)
    suffix = f"x{nodes_text}" if nodes_text and int(nodes_text) > 1 else ""
    return Target(
        text=f"{ref}{suffix}",  # as the grammar writes it: tpu:v5e-16, cuda:h100-8x2
        device=ref.name,
        chip=chip.name,
        model=chip.model,
        hosts=hosts,
        chips_per_host=shape.chips_per_host,
        processes=shape.chips_per_host * chip.devices,
        topology=shape.topology,
        compiler_topology=topology,
        accelerator_type=chip.accelerator_type_of(shape),
        slice=is_slice,
        resource=resource_key(registry, ref.name),
        source=f"{chip.source} (as of {chip.as_of})",
        chip_facts=chip,
    )


def resource_key(registry: Registry, device: str) -> str | None:
    """The Kubernetes extended resource the device's chips are counted in, as its plugin declares it (serving)."""
    for engine in registry.get(device).spec.serving.values():
        server = getattr(engine, "model_server", None)
        if server is not None and server.resource:
            return str(server.resource)
    return None


def _nodes(text: str | None, target: str, is_slice: bool, device: str, chip: str, count: int) -> int:
    if text is None:
        return 1
    nodes = int(text)
    if is_slice:
        raise SelectionError(
            f"--target {target}: a {device} slice is one job of its own hosts; several slices (multislice) are not written.",
            f"Name one larger slice instead of {device}:{chip}-{count}x{nodes}.",
        )
    if not 1 <= nodes <= MAX_HOSTS:
        raise SelectionError(f"--target {target}: {nodes} hosts is outside 1..{MAX_HOSTS}.", "Name 1 or more hosts, e.g. x2.")
    return nodes


def _host_only(device: str, variant: str, text: str) -> Target:
    """A device without chips (cpu): ``cpu`` is one process on one host, ``cpu:PxH`` P processes on each of H hosts."""
    match = _HOSTS.fullmatch(variant) if variant else None
    if variant and match is None:
        raise SelectionError(
            f"--target {text!r}: {device} has no chips to name; write {device}, or {device}:PROCESSESxHOSTS.",
            f"e.g. {device}:1x2 (one process on each of two hosts).",
        )
    processes, hosts = (int(match[1]), int(match[2])) if match else (1, 1)
    if not 1 <= processes <= 1024 or not 1 <= hosts <= MAX_HOSTS:
        raise SelectionError(
            f"--target {text}: {processes} process(es) on {hosts} host(s) is outside 1..1024 x 1..{MAX_HOSTS}.",
            f"e.g. {device}:1x2.",
        )
    spelled = f"{device}:{processes}x{hosts}" if match else device
    return Target(text=spelled, device=device, chip=None, model=None, hosts=hosts, chips_per_host=0, processes=processes)
