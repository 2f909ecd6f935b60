"""``torch.cuda.*`` and ``torch.accelerator.*`` as the script sees them: every public name is decided here.

The script and its libraries hold views of these modules (:mod:`.scope`); torch's own code holds
the real ones and is never affected. In the ``torch.cuda`` view each public name is exactly one of:

* **mapped** to ``ad.device_module()`` (:data:`MAPPED`, :data:`ALIASES`), or to torch's CPU RNG on cpu;
* **answered neutrally** with the value that is true on the device (:data:`NEUTRAL`:
  ``is_current_stream_capturing() -> False``, ``get_arch_list() -> []``; memory counters the device does
  not keep -> 0); ``make_graphed_callables`` returns the callables; ``nvtx`` ranges do nothing;
* a **class** that stays a class (``Event``, ``Stream``, ``device``, legacy ``FloatTensor``: see
  :mod:`~anydevice.cuda_compat.host_types`);
* **refused**: :class:`~anydevice.errors.UnsupportedDeviceFunctionError` naming the call and the device.

CUDA's own implementation is never called from the view, and every answer is the same for every
caller of the view: no frame is read. ``torch.accelerator``'s view says the selected device is the
accelerator (on a host device it is torch's own: no accelerator). Exceptions (``torch.cuda.OutOfMemoryError``) are kept.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from anydevice.cuda_compat.host_types import HostQueue, host_types, legacy_tensor_types, refused_type
from anydevice.cuda_compat.migration_report import REDIRECTED, REFUSED
from anydevice.cuda_compat.redirect import CUDA, Redirect
from anydevice.cuda_compat.stand_ins import WHERE, stand_in
from anydevice.errors import UnsupportedDeviceFunctionError

MAPPED = (
    "synchronize", "manual_seed", "manual_seed_all",
    "get_device_name", "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "empty_cache", "init", "is_bf16_supported",
)  # fmt: skip
"""``torch.cuda`` names answered by ``ad.device_module()``."""
ALIASES = {
    "memory_cached": "memory_reserved",
    "max_memory_cached": "max_memory_reserved",
    "reset_max_memory_allocated": "reset_peak_memory_stats",
    "reset_max_memory_cached": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_peak_memory_stats",
}
"""Deprecated ``torch.cuda`` names -> the device module function they mean."""
COUNTERS: dict[str, Any] = {
    "memory_allocated": 0,
    "max_memory_allocated": 0,
    "memory_reserved": 0,
    "max_memory_reserved": 0,
    "memory_stats": {},
    "reset_peak_memory_stats": None,
}
"""What a memory counter the device does not keep answers (nothing is allocated through CUDA)."""
NEUTRAL: dict[str, tuple[Any, str]] = {
    "is_current_stream_capturing": (False, "no CUDA graph is ever captured"),
    "is_tf32_supported": (False, "TF32 is a CUDA format"),
    "get_arch_list": ([], "no CUDA architectures"),
    "get_gencode_flags": ("", "no CUDA architectures"),
    "can_device_access_peer": (False, "no CUDA peers"),
    "get_sync_debug_mode": (0, "CUDA sync debugging is off"),
    "set_sync_debug_mode": (None, "CUDA sync debugging has nothing to watch"),
    "ipc_collect": (None, "no CUDA IPC memory"),
    "set_per_process_memory_fraction": (None, "no CUDA allocator to limit"),
    "memory_stats_as_nested_dict": ({}, "no CUDA allocator statistics"),
}
"""``torch.cuda`` functions with a value that is true on any non-CUDA device: (value, why)."""
RNG_CPU: dict[str, Callable[..., Any]] = {
    "seed": torch.seed,
    "seed_all": torch.seed,
    "initial_seed": torch.initial_seed,
    "get_rng_state": lambda device="cuda": torch.get_rng_state(),
    "set_rng_state": lambda new_state, device="cuda": torch.set_rng_state(new_state),
    "get_rng_state_all": lambda: [torch.get_rng_state()],
    "set_rng_state_all": lambda new_states: torch.set_rng_state(new_states[0]),
}
"""On cpu the CUDA generator's job is the CPU generator's."""
STREAM_FUNCTIONS = ("current_stream", "default_stream", "stream", "set_stream")
REFUSED_TYPES = {
    "CUDAGraph": "CUDA graphs capture CUDA kernels; run the callable itself",
    "graph": "CUDA graphs capture CUDA kernels; run the code inside it directly",
    "MemPool": "no CUDA caching allocator",
    "CUDAPluggableAllocator": "no CUDA caching allocator",
    "GreenContext": "no CUDA streaming multiprocessors",
    "cudaStatus": "no CUDA runtime",
}
REASONS = {
    "mem_get_info": "the device reports no free/total memory pair",
}
CAPABILITY = (0, 0)
"""``get_device_capability()`` (and ``get_device_properties().major/minor``) on a device without CUDA.

There is no CUDA compute capability; (0, 0) is below every CUDA architecture, so the checks frameworks make
after ``is_available()`` (Lightning's ``_is_ampere_or_later``, transformers' TF32 check, Accelerate's
bf16/fp8 checks, flash-attention gates) select no CUDA-only path and go on. bf16 is asked of
``torch.cuda.is_bf16_supported()``, which answers for the device.
"""
CAPABILITY_WHY = "no CUDA compute capability: (0, 0) selects no CUDA-only path (TF32, tensor-core dtypes, CUDA kernels)"
NVTX = {"range_push": 0, "range_pop": 0, "range_start": 0, "range_end": None, "mark": None}


def _cuda_names() -> dict[str, Any]:
    """Public ``torch.cuda`` names defined by torch.cuda itself (not typing helpers, not submodules)."""
    names = {}
    for name, value in vars(torch.cuda).items():
        if name.startswith("_") or inspect.ismodule(value) or not callable(value):
            continue
        if isinstance(value, type) and issubclass(value, BaseException):
            continue  # `except torch.cuda.OutOfMemoryError:` keeps working
        if str(getattr(value, "__module__", "")).startswith("torch.cuda") or name in REFUSED_TYPES:
            names[name] = value
    return names


def cuda_view(r: Redirect) -> dict[str, Any]:
    """What the script's ``torch.cuda`` holds instead of every public function and class (module docstring)."""
    cuda = torch.cuda
    view: dict[str, Any] = {}
    done: set[str] = set()

    def put(name: str, value: Any) -> None:
        if isinstance(value, type) and WHERE not in value.__dict__:
            type.__setattr__(value, WHERE, f"torch.cuda:{name}")
        view[name] = stand_in(value, f"torch.cuda:{name}")  # pickles as the real torch.cuda.<name>
        done.add(name)

    for name in MAPPED:
        put(name, _mapped(r, f"torch.cuda.{name}()", name))
    for name, target in ALIASES.items():
        put(name, _mapped(r, f"torch.cuda.{name}()", target))
    for name, fn in _questions(r, "torch.cuda").items():
        put(name, fn)
    for name, fn in _hardware_questions(r).items():
        put(name, fn)
    put(
        "is_initialized",
        lambda *a, **k: r.neutral("torch.cuda.is_initialized()", True, f"{r.name} was initialised when selected"),
    )
    for name, (value, why) in NEUTRAL.items():
        if name not in done:
            put(name, _neutral(r, name, value, why))
    if r.host:
        for name, fn in RNG_CPU.items():
            put(name, _counted(r, name, fn, "the CPU generator"))
    put("make_graphed_callables", _graphed(r))
    view["default_generators"] = DefaultGenerators(r)
    _streams(r, put)
    for name, cls in legacy_tensor_types(r.target).items():
        put(name, cls)
    for name, reason in REFUSED_TYPES.items():
        if hasattr(cuda, name):
            put(name, refused_type(name, r.name, reason))
    for name, value in sorted(_cuda_names().items()):
        if name in done:
            continue
        if isinstance(value, type):
            put(name, refused_type(name, r.name, "a CUDA-only type"))
        else:
            put(name, _refused(r, name))
    put("nvtx", _nvtx(r))
    return view


class DefaultGenerators(Sequence[Any]):
    """``torch.cuda.default_generators`` under cuda-compat: the selected device's default generator per device.

    On the host and on lazy devices (XLA has no device generators) each is the CPU's ``torch.default_generator``,
    as ``torch.Generator(device="cuda")`` is a CPU generator there; elsewhere the device's own
    (``torch.<type>.default_generators``). A device without them is refused by name, an index past the
    device count is an ``IndexError`` naming the count (not CPU torch's empty tuple).
    """

    def __init__(self, r: Redirect) -> None:
        self.r = r

    def _generators(self) -> tuple[Any, ...]:
        r = self.r
        count = int(r.module.device_count()) if not r.host else max(1, r.local_world_size or 1)
        if r.host or r.lazy:
            r.report.add("torch.cuda.default_generators", REDIRECTED, "the CPU generator")
            return (torch.default_generator,) * count
        found = tuple(getattr(getattr(torch, r.target.type, None), "default_generators", ()) or ())
        if not found:
            reason = f"torch.{r.target.type} has no default generators"
            r.report.add("torch.cuda.default_generators", REFUSED, reason)
            raise UnsupportedDeviceFunctionError(
                "torch.cuda.default_generators", r.name, reason, "Make one: torch.Generator(device='cuda').manual_seed(seed)."
            )
        r.report.add("torch.cuda.default_generators", REDIRECTED, f"torch.{r.target.type}.default_generators")
        return found

    def __getitem__(self, index: Any) -> Any:
        generators = self._generators()
        try:
            return generators[index]
        except IndexError:
            raise IndexError(
                f"torch.cuda.default_generators[{index}]: cuda-compat on {self.r.name} has {len(generators)} device(s), "
                f"indices 0 to {len(generators) - 1}"
            ) from None

    def __len__(self) -> int:
        return len(self._generators())

    def __repr__(self) -> str:
        return repr(self._generators())


def _mapped(r: Redirect, call: str, target: str) -> Callable[..., Any]:
    """``call`` answered by the device module's ``target``; a memory counter it lacks answers :data:`COUNTERS`."""
    fn = getattr(r.module, target)
    where = f"ad.device_module().{target}() on {r.name}"

    def mapped(*args: Any, **kwargs: Any) -> Any:
        try:
            value = fn(*args, **kwargs)
        except UnsupportedDeviceFunctionError as exc:
            if target not in COUNTERS:
                r.report.add(call, REFUSED, str(exc))
                raise
            fallback = COUNTERS[target]
            return r.neutral(call, dict(fallback) if isinstance(fallback, dict) else fallback, exc.reason)
        r.report.add(call, REDIRECTED, where)
        return value

    return functools.wraps(fn)(mapped) if callable(fn) else mapped


def _questions(r: Redirect, prefix: str) -> dict[str, Callable[..., Any]]:
    """``is_available``, ``device_count``, ``current_device``, ``set_device``: answers taken once, at enable.

    Plain values, so a question gets the same answer in eager code, inside ``torch.compile`` (dynamo folds
    them to constants, ``fullgraph=True`` included), in forked workers and (enabled again) in spawned
    children. On a host device under a launcher the count is the local ranks and the current device is the
    local rank (``cuda:i`` is rank i's device).
    """
    ranks = r.local_world_size if r.host else None
    available = bool(r.module.is_available())
    count = ranks if ranks is not None else int(r.module.device_count())
    current = [r.local_rank if ranks is not None else int(r.module.current_device())]
    where = f"{r.name}: one device per local rank" if ranks is not None else f"ad.device_module() on {r.name}"

    def said(call: str, value: Any) -> Any:
        if not torch.compiler.is_compiling():
            r.report.add(f"{prefix}.{call}()", REDIRECTED, f"{value!r} ({where})")
        return value

    def is_available() -> bool:
        return bool(said("is_available", available))

    def device_count() -> int:
        return int(said("device_count", count))

    def current_device() -> int:
        return int(said("current_device", current[0]))

    def set_device(device: Any) -> None:
        index = device if isinstance(device, int) else getattr(torch.device(device), "index", None)
        if index is None or index < 0:
            return
        if ranks is None:
            r.module.set_device(index)
        current[0] = index
        said("set_device", index)

    return {
        "is_available": is_available,
        "device_count": device_count,
        "current_device": current_device,
        "set_device": set_device,
    }


class CompatProperties:
    """``torch.cuda.get_device_properties()`` under cuda-compat: the device's, ``major``/``minor`` as :data:`CAPABILITY`."""

    def __init__(self, properties: Any) -> None:
        self._properties = properties
        self.major, self.minor = CAPABILITY

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_properties"), name)

    def __repr__(self) -> str:
        return repr(self._properties)


def _host_memory() -> tuple[int, int]:
    """(available, total) host memory in bytes, as the kernel reports it."""
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, total
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), total


def _hardware_questions(r: Redirect) -> dict[str, Callable[..., Any]]:
    """The questions CUDA frameworks ask after ``is_available()``: capability, properties, free memory (docs/integrations.md)."""
    properties = r.module.get_device_properties

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return tuple(r.neutral("torch.cuda.get_device_capability()", CAPABILITY, CAPABILITY_WHY))  # type: ignore[return-value]  # a 2-tuple

    def get_device_properties(device: Any = None) -> Any:
        where = f"ad.device_module() on {r.name}; major.minor {CAPABILITY}"
        r.report.add("torch.cuda.get_device_properties()", REDIRECTED, where)
        return CompatProperties(properties() if device is None else properties(device))

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        if r.host:
            free, total = _host_memory()
            r.report.add("torch.cuda.mem_get_info()", REDIRECTED, f"host memory (available, total) on {r.name}")
            return free, total
        try:
            total = int(properties().total_memory)
            used = int(r.module.memory_reserved())
        except UnsupportedDeviceFunctionError as exc:
            r.report.add("torch.cuda.mem_get_info()", REFUSED, exc.reason)
            raise
        r.report.add("torch.cuda.mem_get_info()", REDIRECTED, f"{r.name}'s total memory less what anydevice sees reserved")
        return total - used, total

    return {
        "get_device_capability": get_device_capability,
        "get_device_properties": get_device_properties,
        "mem_get_info": mem_get_info,
    }


def _neutral(r: Redirect, name: str, value: Any, why: str) -> Callable[..., Any]:
    call = f"torch.cuda.{name}()"

    def neutral(*args: Any, **kwargs: Any) -> Any:
        return r.neutral(call, value, why)

    neutral.__name__ = name
    return neutral


def _counted(r: Redirect, name: str, fn: Callable[..., Any], where: str) -> Callable[..., Any]:
    call = f"torch.cuda.{name}()"

    def counted(*args: Any, **kwargs: Any) -> Any:
        r.report.add(call, REDIRECTED, where)
        return fn(*args, **kwargs)

    counted.__name__ = name
    return counted


def _refused(r: Redirect, name: str) -> Callable[..., Any]:
    call = f"torch.cuda.{name}()"
    reason = REASONS.get(name, "it is CUDA-only and has no equivalent there")

    def refused(*args: Any, **kwargs: Any) -> Any:
        error = UnsupportedDeviceFunctionError(
            call, r.name, reason, "Guard the call (or remove it); cuda-compat maps only what the device can answer."
        )
        r.report.add(call, REFUSED, reason)
        raise error

    refused.__name__ = name
    return refused


def _graphed(r: Redirect) -> Callable[..., Any]:
    def make_graphed_callables(callables: Any, *args: Any, **kwargs: Any) -> Any:
        r.neutral(
            "torch.cuda.make_graphed_callables()", "the callables", "CUDA graphs only speed up; the callables run as they are"
        )
        return callables

    return make_graphed_callables


def _streams(r: Redirect, put: Callable[[str, Any], None]) -> None:
    """Streams and events: the device's own where it has them (not cpu), else the host stand-ins."""
    native = getattr(r.module, "_native", None)
    if not r.host and all(hasattr(native, n) for n in ("Stream", "Event", "current_stream", "stream")):
        for name in ("Stream", "Event", "current_stream", "stream"):
            put(name, getattr(native, name))
        return
    queue = HostQueue(r.name, r.module.synchronize, r.module.set_device, r.module.current_device)
    types = host_types(queue)
    for name, cls in types.items():
        put(name, cls)
    only = types["Stream"]()
    Context = types["StreamContext"]
    call = "torch.cuda.{}()"

    def current_stream(device: Any = None) -> Any:
        r.report.add(call.format("current_stream"), REDIRECTED, f"{r.name}'s one in-order queue")
        return only

    def default_stream(device: Any = None) -> Any:
        r.report.add(call.format("default_stream"), REDIRECTED, f"{r.name}'s one in-order queue")
        return only

    def stream(stream: Any) -> Any:
        r.report.add(call.format("stream"), REDIRECTED, f"{r.name}'s one in-order queue")
        return Context(stream)

    def set_stream(stream: Any) -> None:
        r.report.add(call.format("set_stream"), REDIRECTED, f"{r.name}'s one in-order queue")

    for fn in (current_stream, default_stream, stream, set_stream):
        put(fn.__name__, fn)
    record_stream = torch.Tensor.record_stream
    host_stream = types["Stream"]

    def record_stream_on_queue(self: torch.Tensor, stream: Any) -> None:
        """``tensor.record_stream(torch.cuda.current_stream())`` (prefetchers): one queue, nothing to record."""
        if isinstance(stream, host_stream):
            r.neutral("Tensor.record_stream()", None, f"{r.name} runs one in-order queue")
            return None
        return record_stream(self, stream)  # type: ignore[no-any-return]  # the original record_stream is untyped

    r.patches.set(torch.Tensor, "record_stream", record_stream_on_queue)


def _nvtx(r: Redirect) -> Any:
    """``torch.cuda.nvtx`` ranges mark CUDA profiles: nothing to mark here (a view of the nvtx module)."""
    nvtx = torch.cuda.nvtx
    view: dict[str, Any] = {}
    for name, value in NVTX.items():
        if hasattr(nvtx, name):
            view[name] = _neutral(r, f"nvtx.{name}", value, "NVTX marks CUDA profiles only")

    @contextlib.contextmanager
    def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:  # noqa: A001 - nvtx's name
        r.neutral("torch.cuda.nvtx.range()", None, "NVTX marks CUDA profiles only")
        yield

    view["range"] = range
    return r.scope.add_view(nvtx, view)


# -- torch.accelerator -------------------------------------------------------------------------------
ACCELERATOR = {
    "synchronize": "synchronize",
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
}
"""``torch.accelerator`` functions -> the device module function a script gets (count and index: :func:`_questions`)."""


def accelerator_view(r: Redirect) -> dict[str, Any]:
    """What the script's ``torch.accelerator`` holds: the selected device is the accelerator, as torch says.

    On a host device (cpu) torch reports no accelerator, and so does the view (nothing is overridden): a
    device-agnostic program ("bf16 autocast when there is an accelerator") computes bit for bit what it
    computes without cuda-compat. On an accelerator (xla, tpu, ...) the view reports the selected one.
    """
    acc = getattr(torch, "accelerator", None)
    if acc is None or r.host:
        return {}
    device_type = r.target.type

    def available() -> bool:
        r.report.add("torch.accelerator.is_available()", REDIRECTED, f"True ({r.name} is selected)")
        return True

    def current(check_available: bool = False) -> torch.device:
        r.report.add("torch.accelerator.current_accelerator()", REDIRECTED, f"torch.device({device_type!r})")
        return torch.device(device_type)

    asked = _questions(r, "torch.accelerator")
    answers: dict[str, Callable[..., Any]] = {"is_available": available, "current_accelerator": current}
    answers["device_count"] = asked["device_count"]
    answers["current_device_index"] = answers["current_device_idx"] = asked["current_device"]
    answers["set_device_index"] = answers["set_device_idx"] = asked["set_device"]
    for name, target in ACCELERATOR.items():
        answers.setdefault(name, _mapped(r, f"torch.accelerator.{name}()", target))
    return {
        name: stand_in(functools.wraps(getattr(acc, name))(fn), f"torch.accelerator:{name}")
        for name, fn in answers.items()
        if hasattr(acc, name)
    }


def get_device_module_view(r: Redirect, cuda: Any) -> Callable[..., Any]:
    """``torch.get_device_module``: ``"cuda"`` is the script's ``torch.cuda``, the selected device's type its device module.

    A library that asks ``torch.accelerator`` for the accelerator (the selected device, in the view) and then
    for its module gets one, also where torch registers none (``torch.xla``).
    """
    original = torch.get_device_module

    @functools.wraps(original)
    def get_device_module(device: Any = None) -> Any:
        if device is None and r.host:
            return original()  # no accelerator on a host device: torch's own answer
        kind = r.target.type if device is None else torch.device(device).type if isinstance(device, (str, torch.device)) else None
        if kind == CUDA:
            return cuda
        if kind == r.target.type:
            try:
                return original(r.target.type)
            except (RuntimeError, AttributeError):
                return r.module
        return original(device)

    return get_device_module
