"""What a plugin declares for ``anydevice check``, ``ad.capabilities()`` and strict mode: :class:`CheckFacts`.

One section of a :class:`~anydevice.contract.device_spec.DeviceSpec` (``DeviceSpec.check``). Every field has a
default, so a third-party device that declares nothing still gets a report (its unknowns are said
to be unknown, never guessed); a device that declares its dtypes, memory per chip, topology and op
table gets the full report without any code in core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

ALL_DTYPES: Final = frozenset(
    {
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    }
)
"""The dtypes every PyTorch backend with full eager coverage (cpu, cuda) allocates and computes in."""
FP8: Final = frozenset({"float8_e4m3fn", "float8_e5m2"})
"""The fp8 variants torch names (``torch.float8_e4m3fn``, ``torch.float8_e5m2``)."""
NO_DOUBLE: Final = ALL_DTYPES - {"float64", "complex64", "complex128"}
"""What TPUs and Trainium compute in: no float64 and no complex numbers."""

FallbackMechanism = Literal["never", "counters", "warnings", "unknown"]
"""How strict mode notices an op that ran on the CPU instead of the device:

``never``: the device runs every op or raises (cpu, cuda, mps, xpu); ``counters``: the runtime counts
fallbacks (the shim's ``Diagnostics.fallback_ops``, torch_xla); ``warnings``: the runtime warns with a
message matching :attr:`CheckFacts.fallback_warning` (TorchTPU's ``<TorchTpu/Performance/``); ``unknown``:
nothing declared, so strict mode refuses to pretend it checks.
"""


@dataclass(frozen=True)
class OpTable:
    """Where the per-op verdicts (native / CPU fallback / unsupported) for a device come from.

    :param source: what it is, for the report (``TorchNeuron torch_api_compatibility.md``).
    :param version: the vendor release the table belongs to.
    :param date: when the table was published (ISO date).
    :param ops: ATen op name (``aten.nonzero``, overload-free) -> ``native``, ``cpu_fallback`` or
        ``unsupported``; ops not listed are ``unknown``.
    :param dispatch_key: instead of (or besides) ``ops``: the dispatch key whose registered kernels decide,
        checked locally when the vendor package is importable (``XLA`` for torch_xla): an op with a kernel
        for the key, or one that decomposes, is native; any other op falls back to the CPU.
    :param module: the module to import so the dispatch key's kernels are registered (``torch_xla``).
    :param probe: ``"module:function"`` taking a function of a device that runs one op, returning the names of
        the ops that ran on the CPU: ops without a kernel for the key are run once on the device to decide
        (torch_xla on PJRT CPU: ``anydevice.plugin:lazy_xla.fallback_probe``; the function may be a dotted path).
    """

    source: str
    version: str = "unknown"
    date: str = "unknown"
    ops: Mapping[str, str] = field(default_factory=dict)
    dispatch_key: str | None = None
    module: str | None = None
    probe: str | None = None


class CompileSlice(Protocol):
    """A slice a :class:`SliceCompiler` parsed: its canonical name, the compiler's topology, what its size counts."""

    @property
    def name(self) -> str: ...
    @property
    def topology(self) -> str: ...
    @property
    def counting(self) -> str: ...
    @property
    def chips(self) -> int: ...


class SliceCompiler(Protocol):
    """Compiles a training step for a named slice of a device with its vendor's compiler on this host, no chip needed
    (``anydevice check --target tpu:<slice>``): what ``CheckFacts.slice_compiler`` returns (a module may be one).

    ``EXAMPLE``: a slice name for messages; ``EXTRA_FIX``: what to install when :meth:`available` says why not;
    ``compile_step(model, args, kwargs, *, target, mesh, optimizer, loss, ...)`` returns the fields of
    :class:`~anydevice.preflight.schema.CompiledStep` (the compiler's own numbers and words).
    """

    EXAMPLE: str
    EXTRA_FIX: str
    compile_step: Callable[..., dict[str, Any]]

    def available(self) -> str | None: ...
    def parse_slice(self, text: str) -> CompileSlice: ...


@dataclass(frozen=True)
class CheckFacts:
    """A device's facts for ``anydevice check`` and ``ad.capabilities()``; every field has a default.

    :param dtypes: dtype names the device computes in (``torch.<name>``); None: unknown.
    :param static_shapes: True where every new input shape is a new compile (XLA, TorchNeuron, TorchTPU).
    :param memory_per_chip: chip name -> bytes of device memory per chip (HBM); empty: unknown.
    :param world_sizes: chip name -> the process counts a launch may use on one host (TorchTPU's whole
        slices); a chip not listed, or an empty mapping, allows any count.
    :param op_table: where per-op verdicts come from (:class:`OpTable`), or None (ops not verified).
    :param fallback: how strict mode notices CPU fallback (:data:`FallbackMechanism`).
    :param fallback_warning: with ``fallback="warnings"``: a regular expression the runtime's fallback
        warnings match; strict mode turns them into errors.
    :param strict_refusal: with ``fallback="unknown"``: (why strict mode cannot watch this device, what to use
        instead), for the refusal's message; None: a generic one.
    :param compile_backends: ``torch.compile`` backends the device runs (its own first).
    :param runs_cuda_calls: ``torch.cuda`` calls run natively here (the CUDA device itself): not reported.
    :param dist_backend: the ``torch.distributed`` backend the device's collectives use (``xla``, ``nccl``); None: unknown.
    :param lacking_reduce_ops: ``ReduceOp`` names its process group rejects (the same set as the collectives shim's
        ``Collectives.lacking_reduce_ops``; ``{"AVG"}`` on torch_xla); None: unknown, collectives are not checked.
    :param sources: where these facts come from, one phrase each (docs, tables, runs), for the report.
    :param slice_compiler: a function returning the device's :class:`SliceCompiler` (it may import the vendor's
        compiler: called, through the registry's guard, only when a slice target asks for it); None: slice targets
        are refused.
    :param refused_calls: calls the device's runtime refuses, found in the script's own source at their line
        (they may come after the steps ``check`` runs, in validation or sampling): a dotted name
        (``torch.inference_mode``), or ``name(device=)`` for a call given a ``device`` keyword -> (why, the fix).
    """

    dtypes: frozenset[str] | None = None
    static_shapes: bool = False
    memory_per_chip: Mapping[str, int] = field(default_factory=dict)
    world_sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    op_table: OpTable | None = None
    fallback: FallbackMechanism = "unknown"
    fallback_warning: str | None = None
    strict_refusal: tuple[str, str] | None = None
    compile_backends: tuple[str, ...] = ()
    runs_cuda_calls: bool = False
    dist_backend: str | None = None
    lacking_reduce_ops: frozenset[str] | None = None
    sources: tuple[str, ...] = ()
    slice_compiler: Callable[[], SliceCompiler] | None = None
    refused_calls: Mapping[str, tuple[str, str]] = field(default_factory=dict)


GiB: Final = 1 << 30
DEFAULT_FACTS: Final = CheckFacts()
"""What a device that declares nothing gets: every fact unknown."""


@dataclass(frozen=True)
class StepLoss:
    """The loss a slice compiler (``CheckFacts.slice_compiler``) takes the gradient of, as ``anydevice check`` chose it.

    ``kind``: ``"model"`` (the model returns a scalar, or an output with ``.loss``), ``"cross_entropy"`` or ``"mse"``
    against ``target`` (the batch's tensor the model was not given; only its shape and dtype are used), or ``"sum"``
    (the summed output).
    """

    kind: str = "sum"
    target: Any = None
