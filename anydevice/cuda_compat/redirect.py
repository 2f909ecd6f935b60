"""The device half of cuda-compat: ``"cuda"`` devices, ``.cuda()``, ``torch.load`` of GPU checkpoints.

:class:`Redirect` holds what every patch needs (the selected backend, its device module, the
migration report, the undo list, the script's view of torch) and maps CUDA devices to the selected
one: ``"cuda"``, ``"cuda:i"``, ``torch.device("cuda", i)`` and ``device=i`` in the factory functions
(:data:`FACTORIES`), ``Tensor.to``/``new_*``, ``Module.to``/``to_empty``, ``.cuda()``. ``cuda:i`` is the
process's own device when ``i`` is its local rank (``cuda:LOCAL_RANK``), else index ``i``.
``torch.device("cuda")`` itself stays a CUDA device object (it is a C type): what a script prints
for it is "cuda", while every tensor made with it reports the real device.

These wrappers are shared by everyone (torch's own code passes a script's ``device="cuda"`` on), so
each is transparent by construction: it rewrites only an argument that names CUDA and otherwise calls
the original with the very same arguments. torch's tables keyed by a function's identity that are
built on first use (the device-context constructors behind ``with torch.device("meta"):``) are built
from the originals before anything is replaced. ``Module.to``/``.cuda()`` to a CUDA device keep
every Parameter and buffer object (swapped in place, as on CUDA), so optimizers and hooks made
before the move keep working.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from anydevice import settings
from anydevice.cuda_compat.migration_report import NEUTRAL, REDIRECTED, MigrationReport
from anydevice.cuda_compat.patches import Patches
from anydevice.cuda_compat.scope import INTERNAL_PACKAGES, Scope
from anydevice.cuda_compat.stand_ins import WHERE, StandInType, picklable

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend

FACTORIES = (
    "tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "range", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "empty_permuted", "normal", "tril_indices",
    "triu_indices", "scalar_tensor", "sparse_coo_tensor", "sparse_csr_tensor", "frombuffer", "from_file",
    "hann_window", "hamming_window", "bartlett_window", "blackman_window", "kaiser_window", "set_default_device",
)  # fmt: skip
"""``torch.*`` functions whose ``device=`` is redirected."""
CUDA = "cuda"
"""The device type cuda-compat translates: the subject of this feature, not a fact of any device's plugin."""
TENSOR_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")


def _prime_identity_tables() -> None:
    """Build torch's first-use tables of function identities from the originals, before any is replaced."""
    from torch.jit import _builtins
    from torch.utils import _device

    _device._device_constructors()
    _builtins._get_builtin_table()  # type: ignore[no-untyped-call]  # torch.jit's _builtins are untyped


def same_builtin(original: Any, replacement: Any) -> Any:
    """Make TorchScript compile ``replacement`` as the aten op ``original`` is (``torch.jit.script`` of ``torch.zeros``)."""
    from torch.jit import _builtins

    op = _builtins._find_builtin(original)  # type: ignore[no-untyped-call]  # torch.jit's _builtins are untyped
    if op is not None:
        _builtins._register_builtin(replacement, op)
    return replacement


def _optional_int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _tell(f: Any) -> int | None:
    return int(f.tell()) if hasattr(f, "seek") and hasattr(f, "tell") else None


def _seek(f: Any, where: int | None) -> None:
    if where is not None:
        f.seek(where)


class Redirect:
    """State shared by the cuda-compat patches for one selected backend."""

    def __init__(self, backend: Backend, device_module: Any, cuda: bool = True) -> None:
        self.backend = backend
        self.cuda = cuda
        """Whether CUDA devices are mapped (cuda-compat); False: only the device-agnostic API answers (:mod:`.accelerator`)."""
        self.placement = backend.shims.placement
        self.module = device_module
        self.target: torch.device = self.placement.device()
        self.name = backend.name
        # declared by the plugin's placement (shims/contracts.py), never inferred
        self.lazy: bool = self.placement.lazy
        self.host: bool = self.placement.host
        self.pinned_memory: bool = self.placement.pinned_memory and not self.host
        collectives = backend.shims.collectives
        self.dist_backend: str = collectives.backend
        self.init_method: str = collectives.init_method
        self.indexed = not (self.host or self.lazy)  # takes device ids (DDP, init_process_group)
        vendors = {name.replace("-", "_").partition(".")[0] for name in backend.versions}  # torch_xla, torch_tpu, ...
        self.scope = Scope(INTERNAL_PACKAGES | vendors)
        name = backend.name if str(self.target) == backend.name else f"{backend.name} ({self.target})"
        self.report = MigrationReport(name, self.scope.internal)
        self.patches = Patches()
        self._said: set[str] = set()
        self.local_rank = _optional_int(settings.LOCAL_RANK.get()) or 0
        self.local_world_size = _optional_int(settings.LOCAL_WORLD_SIZE.get())

    # -- messages ----------------------------------------------------------------------------------
    def notice(self, line: str) -> None:
        """One stderr line, once per process (rank 0; ``ANYDEVICE_QUIET=1`` silences it)."""
        from anydevice import settings

        if line in self._said:
            return
        self._said.add(line)
        if not settings.ANYDEVICE_QUIET.flag() and (settings.RANK.get() or "0") == "0":
            sys.stderr.write(f"anydevice: cuda-compat: {line}\n")

    def neutral(self, call: str, value: Any, why: str) -> Any:
        """Record ``call`` as answered neutrally with ``value`` and return it."""
        self.report.add(call, NEUTRAL, f"{value!r} ({why})")
        return value

    # -- devices ---------------------------------------------------------------------------------
    def device(self, value: Any, ints: bool = False, call: str = "device='cuda'") -> Any:
        """``value`` with a CUDA device replaced by the selected one; anything else unchanged (all of it without CUDA mapping)."""
        if not self.cuda:
            return value
        if isinstance(value, str):
            if value == CUDA or value.startswith(f"{CUDA}:"):
                self.report.add(call, REDIRECTED, str(self.target))
                return self.device_at(torch.device(value).index)
        elif isinstance(value, torch.device):
            if value.type == CUDA:
                self.report.add(call, REDIRECTED, str(self.target))
                return self.device_at(value.index)
        elif ints and isinstance(value, int) and not isinstance(value, bool):
            self.report.add(call, REDIRECTED, str(self.target))
            return self.device_at(value)
        elif isinstance(value, dict):  # map_location={"cuda:1": "cuda:0"}
            return {self.device(k, call=call): self.device(v, call=call) for k, v in value.items()}
        return value

    def device_at(self, index: int | None) -> torch.device:
        """The selected device for CUDA index ``index`` (None: the current one)."""
        if index is None:
            index = int(self.module.current_device())
        if index == self.local_rank:
            return self.target  # cuda:LOCAL_RANK is this process's own device
        return self.placement.device(index)

    def device_type(self, value: Any) -> Any:
        """``"cuda"`` -> the selected device's type (for autocast and GradScaler)."""
        return self.target.type if self.cuda and value == CUDA else value

    def _devices(self, fn: Callable[..., Any], label: str, ints: bool) -> Callable[..., Any]:
        device = self.device
        call = f"{label}(device='cuda')"

        torch_device = torch.device
        maybe = (str, dict, int) if ints else (str, dict)

        @functools.wraps(fn)
        def redirected(*args: Any, **kwargs: Any) -> Any:
            for a in args:  # inline: the common case (a tensor, a CPU/XLA device, a dtype) rewrites nothing
                kind = a.__class__
                if (kind is torch_device and a.type == CUDA) or kind in maybe:
                    args = tuple([device(a, ints, call) for a in args])
                    break
            if kwargs and "device" in kwargs:
                kwargs["device"] = device(kwargs["device"], True, call)
            return fn(*args, **kwargs)

        return redirected

    def install_devices(self) -> None:
        """Factories, ``Tensor.to``/``new_*``, ``Module.to``/``to_empty``, ``.cuda()``, ``torch.load``."""
        patch = self.patches.set
        _prime_identity_tables()
        for name in FACTORIES:
            if hasattr(torch, name):
                original = getattr(torch, name)
                patch(torch, name, same_builtin(original, self._devices(original, f"torch.{name}", ints=False)))
        for name in TENSOR_METHODS:
            patch(torch.Tensor, name, self._devices(getattr(torch.Tensor, name), f"Tensor.{name}", ints=False))
        patch(torch.Tensor, "to", self._devices(torch.Tensor.to, "Tensor.to", ints=True))
        patch(torch.nn.Module, "to", self._module_move(torch.nn.Module.to, "Module.to"))
        patch(torch.nn.Module, "to_empty", self._module_move(torch.nn.Module.to_empty, "Module.to_empty"))
        self._dot_cuda()
        patch(torch, "load", self._load(torch.load))
        self._storages()

    def script_view(self) -> dict[str, Any]:
        """Names of ``torch`` only scripts ask for CUDA (or a lazy device's generator) through: the script's view alone."""
        if not self.cuda:
            return {"Generator": _generator_type(self)} if self.lazy else {}
        return {
            "set_default_tensor_type": self._default_tensor_type(),
            "Generator": _generator_type(self),
        }

    def _module_move(self, move: Callable[..., Any], label: str) -> Callable[..., Any]:
        """``Module.to``/``to_empty`` that map CUDA devices and then keep every Parameter and buffer object."""
        device = self.device
        call = f"{label}(device='cuda')"
        keep = self.keep_identity

        @functools.wraps(move)
        def module_move(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            mapped_args = tuple([device(a, True, call) for a in args])
            mapped_kwargs = {k: device(v, True, call) if k == "device" else v for k, v in kwargs.items()}
            named_cuda = any(a is not b for a, b in zip(args, mapped_args)) or any(
                mapped_kwargs[k] is not v for k, v in kwargs.items()
            )
            if not named_cuda:
                return move(module, *args, **kwargs)
            return keep(module, lambda: move(module, *mapped_args, **mapped_kwargs))

        return module_move

    def keep_identity(self, module: torch.nn.Module, move: Callable[[], Any]) -> Any:
        """Run ``move`` (a ``.to()`` of ``module``) so that its Parameter and buffer objects stay the same.

        As on CUDA, where ``.to("cuda")`` keeps each Parameter: optimizers and hooks made before the move
        keep working. Parameters go through torch's own swap-on-conversion; buffers are swapped the same way.
        """
        if self.host:
            return move()  # moving to the host keeps every tensor as it is
        buffers = [(owner, key, b) for owner in module.modules() for key, b in owner._buffers.items() if b is not None]
        swapping = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            result = move()
        finally:
            torch.__future__.set_swap_module_params_on_conversion(swapping)
        for owner, key, old in buffers:
            new = owner._buffers.get(key)
            if new is not None and new is not old:
                torch.utils.swap_tensors(old, new)  # type: ignore[no-untyped-call]  # torch.utils.swap_tensors is untyped
                owner._buffers[key] = old
        self.report.add("Module.to('cuda')", REDIRECTED, f"{self.target}, keeping every Parameter and buffer object")
        return result

    def _storages(self) -> None:
        """``storage.cuda()`` (``map_location=lambda s, loc: s.cuda()``): the device, or host memory where storages cannot be."""
        redirect = self
        via_host = self.lazy or self.host

        def storage_cuda(self: Any, device: Any = None, non_blocking: bool = False) -> Any:
            redirect.report.add("Storage.cuda()", REDIRECTED, "host memory" if via_host else str(redirect.target))
            return self if via_host else self.to(device=redirect.target, non_blocking=non_blocking)

        for owner in (torch.storage._StorageBase, torch.TypedStorage):
            self.patches.set(owner, "cuda", storage_cuda)

    def _default_tensor_type(self) -> Callable[[Any], None]:
        """``torch.set_default_tensor_type("torch.cuda.FloatTensor")``: that dtype on the selected device."""
        original = torch.set_default_tensor_type
        redirect = self

        @functools.wraps(original)
        def set_default_tensor_type(t: Any) -> None:
            name = t if isinstance(t, str) else f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', '')}"
            if not name.startswith("torch.cuda."):
                return original(t)
            redirect.report.add(f"torch.set_default_tensor_type({name!r})", REDIRECTED, str(redirect.target))
            original(f"torch.{name.removeprefix('torch.cuda.')}")
            torch.set_default_device(redirect.target)

        return set_default_tensor_type

    def _dot_cuda(self) -> None:
        to = torch.Tensor.to
        to_module = torch.nn.Module.to
        redirect = self
        target = str(self.target)

        def tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
            redirect.report.add("Tensor.cuda()", REDIRECTED, target)
            where = redirect.device_at(None) if device is None else redirect.device(device, True, "Tensor.cuda()")
            return to(self, where, non_blocking=non_blocking, **kwargs)

        def module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
            redirect.report.add("Module.cuda()", REDIRECTED, target)
            where = redirect.device_at(None) if device is None else redirect.device(device, True, "Module.cuda()")
            return redirect.keep_identity(self, lambda: to_module(self, where))  # type: ignore[no-any-return]  # the original Module.to, untyped, returns the module

        self.patches.set(torch.Tensor, "cuda", tensor_cuda)
        self.patches.set(torch.nn.Module, "cuda", module_cuda)

    def _load(self, load: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.load``: CUDA-tagged storages (a GPU checkpoint) land on the selected device, ``map_location`` or not."""
        redirect = self

        @functools.wraps(load)
        def load_redirected(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
            mapped = redirect.device(map_location, call="torch.load(map_location='cuda')")
            if map_location is None:
                where = _tell(f)
                try:
                    return load(f, None, *args, **kwargs)  # no cost unless the file holds CUDA storages
                except RuntimeError as exc:
                    if "CUDA" not in str(exc):
                        raise
                _seek(f, where)
                return redirect.load_gpu_checkpoint(load, f, None, args, kwargs)
            if isinstance(map_location, dict) or mapped == map_location:
                return load(f, mapped, *args, **kwargs)
            where = _tell(f)
            try:
                return redirect.load_gpu_checkpoint(load, f, map_location, args, kwargs)
            except RuntimeError as exc:  # tensors saved by a device's own rebuild take a device, not a function
                if "Callable map_location" not in str(exc):
                    raise
            _seek(f, where)
            return load(f, str(redirect.target), *args, **kwargs)

        return load_redirected

    def load_gpu_checkpoint(self, load: Callable[..., Any], f: Any, asked: Any, args: Any, kwargs: Any) -> Any:
        """Load with CUDA locations mapped to the selected device (via the host where storages cannot live there)."""
        from torch.serialization import default_restore_location as default

        default_restore_location: Callable[[Any, str], Any] = default

        target, via_host = self.target, self.lazy or self.host
        gpu_storages: set[int] = set()
        wanted = None if asked is None else self.device(asked)

        def restore(storage: Any, location: str) -> Any:
            if not location.startswith(CUDA):
                if wanted is None:
                    return None  # torch's default: where it was saved (the host)
            else:
                self.report.add("torch.load(<GPU checkpoint>)", REDIRECTED, str(target))
            if via_host:
                gpu_storages.add(storage.data_ptr())
                return storage  # read into host memory: XLA tensors have no storage to restore into
            return default_restore_location(storage, str(target))

        result = load(f, restore, *args, **kwargs)
        if gpu_storages and not self.host:
            from torch.utils._pytree import tree_map_only

            def move(t: torch.Tensor) -> torch.Tensor:
                return t.to(target) if t.untyped_storage().data_ptr() in gpu_storages else t

            result = tree_map_only(torch.Tensor, move, result)
        return result

    def restore(self) -> None:
        """Undo every patch."""
        self.patches.restore()


def _device_type(device: Any) -> str | None:
    """The type a device argument names (``"xla"`` for ``"xla:0"`` or ``torch.device("xla", 0)``), or None."""
    if isinstance(device, torch.device):
        return device.type
    if isinstance(device, str):
        return device.partition(":")[0]
    return None


@picklable
class GeneratorType(StandInType):
    """Metaclass of the script's ``torch.Generator``: the stand-in maps ``device="cuda"``; a subclass is torch's.

    A class the script derives from the stand-in (``class Seeded(torch.Generator)``) is made a subclass of
    torch's own Generator whose ``device="cuda"`` is mapped, so its methods, ``isinstance`` and pickling are
    what they are on CPU torch.
    """

    native: type
    mapped: type
    to_device: Callable[[Any], Any]

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> Any:
        if any(isinstance(base, GeneratorType) for base in bases):
            real = tuple(base.mapped if isinstance(base, GeneratorType) else base for base in bases)
            return type(name, real, namespace, **kwargs)
        return super().__new__(mcls, name, bases, namespace, **kwargs)

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls.native)

    def __subclasscheck__(cls, other: type) -> bool:
        return issubclass(other, cls.native)

    def __call__(cls, device: Any = "cpu") -> Any:
        return cls.native(device=cls.to_device(device))

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls.native, name)


def _generator_type(redirect: Redirect) -> type:
    """``torch.Generator`` that makes ``Generator(device="cuda")`` on the selected device (the host on lazy devices).

    Its instances are torch's own generators, and ``isinstance(g, torch.Generator)`` holds for every generator.
    """
    native = torch._C.Generator
    where = torch.device("cpu") if redirect.lazy else redirect.target  # XLA has no device generators

    def to_device(device: Any) -> Any:
        mapped = redirect.device(device, call="torch.Generator(device='cuda')")
        if mapped is not device:
            return where
        if redirect.lazy and _device_type(device) == redirect.target.type:
            # torch_xla has no device generators ("XLA device type not an accelerator"): a CPU one, seeded the same
            redirect.report.add(f"torch.Generator(device={redirect.target.type!r})", REDIRECTED, "a CPU generator")
            return where
        return device

    class Generator(native):  # type: ignore[misc,valid-type]  # a base chosen at run time (torch's own Generator)
        """torch's Generator with ``device="cuda"`` mapped: the base of a script's Generator subclasses."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            if cls.__init__ is not native.__init__:  # a subclass's own __init__(self, seed): its arguments are its own
                return native.__new__(cls, **({"device": to_device(kwargs["device"])} if "device" in kwargs else {}))
            if args:
                args = (to_device(args[0]), *args[1:])
            if "device" in kwargs:
                kwargs["device"] = to_device(kwargs["device"])
            return native.__new__(cls, *args, **kwargs)

    Generator.__module__ = "torch"
    namespace = {"__module__": "torch", "__doc__": native.__doc__, WHERE: "torch:Generator"}
    made: type = GeneratorType("Generator", (), namespace)
    type.__setattr__(made, "native", native)
    type.__setattr__(made, "mapped", Generator)
    type.__setattr__(made, "to_device", staticmethod(to_device))
    return made
