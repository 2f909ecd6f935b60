"""What ``anydevice.cuda_compat`` patches so that CUDA-written code runs on the selected device.

:class:`CudaRedirect` rewrites, on the live ``torch`` objects (and puts back on :meth:`~CudaRedirect.restore`):

* ``Tensor.cuda()`` / ``Module.cuda()`` -> ``.to(<selected device>)``;
* ``"cuda"``, ``"cuda:i"``, ``torch.device("cuda", i)`` and ``device=i`` in the factory functions
  (:data:`FACTORIES`), ``torch.load(map_location=)``, ``Tensor.to``/``new_*`` and ``Module.to``;
  ``cuda:i`` is the process's own device when ``i`` is its local rank (``cuda:LOCAL_RANK``), else index ``i``;
* ``torch.cuda.*``: the functions of ``ad.device_module()``; what the device lacks warns once and
  returns a neutral value for the memory counters (0, ``{}``); every other public ``torch.cuda``
  function or class warns once (:class:`CudaCompatWarning`) and then runs as it is (usually failing);
* ``torch.autocast("cuda")`` / ``torch.cuda.amp.autocast`` / ``GradScaler("cuda")`` -> the device's type;
* ``init_process_group("nccl")`` -> the device's process-group backend (gloo on cpu), and
  ``DistributedDataParallel(device_ids=[i])`` -> what the device takes (None on cpu and XLA).

On cuda nothing is patched. Not redirected: ``Tensor.is_cuda``, ``torch.Generator(device="cuda")``,
``torch.cuda.nvtx`` and other submodules (see docs/integrations.md).
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from anydevice.device_module import SURFACE
from anydevice.errors import UnsupportedDeviceFunctionError
from anydevice.shims.common import local_rank

if TYPE_CHECKING:
    from anydevice.backend import Backend

FACTORIES = (
    "tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "range", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "empty_permuted", "normal", "tril_indices",
    "triu_indices", "scalar_tensor", "sparse_coo_tensor", "sparse_csr_tensor", "frombuffer", "from_file",
    "hann_window", "hamming_window", "bartlett_window", "blackman_window", "kaiser_window", "load",
    "set_default_device",
)  # fmt: skip
"""``torch.*`` functions whose ``device=`` (``map_location=`` for ``load``) is redirected."""
TENSOR_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")
AUTOCAST_QUERIES = ("get_autocast_dtype", "is_autocast_enabled")
MAPPED = (*SURFACE, "is_initialized", "init", "is_bf16_supported", "device")
"""``torch.cuda`` names answered by ``ad.device_module()``."""
STREAMS = ("Stream", "Event", "current_stream", "stream")
"""Taken from the device module where the device has them; otherwise they warn like any unmapped name."""
NEUTRAL: dict[str, Any] = {
    "memory_allocated": 0,
    "max_memory_allocated": 0,
    "memory_reserved": 0,
    "max_memory_reserved": 0,
    "memory_stats": {},
    "reset_peak_memory_stats": None,
}
"""What a ``torch.cuda`` call the device cannot answer returns (with a warning) instead of failing."""
_MISSING = object()


class CudaCompatWarning(UserWarning):
    """A CUDA call that cuda-compat could not map to the selected device (warned once per call)."""


class CudaRedirect:
    """The patches for one selected backend; :meth:`install` applies them, :meth:`restore` undoes them."""

    def __init__(self, backend: Backend, device_module: Any) -> None:
        self.backend = backend
        self.placement = backend.shims.placement
        self.module = device_module
        self.target = self.placement.device()
        collectives = backend.shims.collectives
        self.dist_backend: str = collectives.backend
        self.init_method: str = collectives.init_method
        self.indexed = self.target.type not in ("cpu", "xla")  # takes device ids (DDP, init_process_group)
        self.patches: list[tuple[Any, str, Any]] = []
        self.warned: set[str] = set()
        self.unmapped: list[str] = []

    # -- devices ---------------------------------------------------------------------------------
    def device(self, value: Any, ints: bool = False) -> Any:
        """``value`` with a CUDA device replaced by the selected one; anything else unchanged."""
        if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
            return self.device_at(torch.device(value).index)
        if isinstance(value, torch.device) and value.type == "cuda":
            return self.device_at(value.index)
        if ints and isinstance(value, int) and not isinstance(value, bool):
            return self.device_at(value)
        if isinstance(value, dict):  # map_location={"cuda:1": "cuda:0"}
            return {self.device(k): self.device(v) for k, v in value.items()}
        return value

    def device_at(self, index: int | None) -> torch.device:
        """The selected device for CUDA index ``index`` (None: the current one)."""
        if index is None:
            index = int(self.module.current_device())
        if index == local_rank():
            return self.placement.device()  # cuda:LOCAL_RANK is this process's own device
        return self.placement.device(index)

    def device_type(self, value: Any) -> Any:
        """``"cuda"`` -> the selected device's type (for autocast and GradScaler)."""
        return self.target.type if value == "cuda" else value

    def _kwargs(self, kwargs: dict[str, Any]) -> None:
        for key in ("device", "map_location"):
            if key in kwargs:
                kwargs[key] = self.device(kwargs[key], ints=True)

    def _devices(self, fn: Callable[..., Any], ints: bool) -> Callable[..., Any]:
        @functools.wraps(fn)
        def redirected(*args: Any, **kwargs: Any) -> Any:
            if args:
                args = tuple(self.device(a, ints) for a in args)
            if kwargs:
                self._kwargs(kwargs)
            return fn(*args, **kwargs)

        return redirected

    # -- patching ----------------------------------------------------------------------------------
    def patch(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name = value``, remembering what was there."""
        self.patches.append(
            (owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name))
        )
        setattr(owner, name, value)

    def restore(self) -> None:
        """Undo every patch, newest first."""
        while self.patches:
            owner, name, original = self.patches.pop()
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    def warn(self, name: str, message: str) -> None:
        """Warn once per CUDA name."""
        if name not in self.warned:
            self.warned.add(name)
            warnings.warn(f"anydevice cuda-compat: {message}", CudaCompatWarning, stacklevel=3)

    def install(self) -> None:
        """Apply every redirection."""
        for name in FACTORIES:
            if hasattr(torch, name):
                self.patch(torch, name, self._devices(getattr(torch, name), ints=False))
        for name in TENSOR_METHODS:
            self.patch(torch.Tensor, name, self._devices(getattr(torch.Tensor, name), ints=False))
        self.patch(torch.Tensor, "to", self._devices(torch.Tensor.to, ints=True))
        self.patch(torch.nn.Module, "to", self._devices(torch.nn.Module.to, ints=True))
        self.patch(torch.nn.Module, "to_empty", self._devices(torch.nn.Module.to_empty, ints=True))
        self._dot_cuda()
        self._torch_cuda()
        self._amp()
        self._distributed()

    def _dot_cuda(self) -> None:
        to = torch.Tensor.to
        redirect = self

        def tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
            target = redirect.device_at(None) if device is None else redirect.device(device, ints=True)
            return to(self, target, non_blocking=non_blocking, **kwargs)

        def module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
            return self.to(redirect.device_at(None) if device is None else redirect.device(device, ints=True))

        self.patch(torch.Tensor, "cuda", tensor_cuda)
        self.patch(torch.nn.Module, "cuda", module_cuda)

    def _cuda_function(self, name: str) -> Callable[..., Any]:
        target = getattr(self.module, name)

        @functools.wraps(target)
        def mapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return target(*args, **kwargs)
            except UnsupportedDeviceFunctionError as exc:
                if name not in NEUTRAL:
                    raise
                self.warn(name, f"torch.cuda.{name}(): {exc.reason} on {exc.device}; it returns {NEUTRAL[name]!r} here.")
                return dict(NEUTRAL[name]) if isinstance(NEUTRAL[name], dict) else NEUTRAL[name]

        return mapped

    def _unmapped(self, name: str, original: Any) -> Callable[..., Any]:
        device = self.backend.name

        @functools.wraps(original)  # keeps __wrapped__: torch 2.15's dynamo reads torch.cuda.use_mem_pool.__wrapped__ at import
        def unmapped(*args: Any, **kwargs: Any) -> Any:
            self.warn(name, f"torch.cuda.{name} has no equivalent on {device}; calling CUDA's own, which may fail.")
            return original(*args, **kwargs)

        return unmapped

    def _torch_cuda(self) -> None:
        cuda = torch.cuda
        before = dict(vars(cuda))
        for name in MAPPED:
            self.patch(cuda, name, self._cuda_function(name))
        done = set(MAPPED)
        for name in STREAMS:
            try:
                value = getattr(self.module, name)
            except AttributeError:
                continue  # the device has none: wrapped below like every unmapped name
            self.patch(cuda, name, value)
            done.add(name)
        for name, value in sorted(before.items()):
            if name.startswith("_") or name in done or inspect.ismodule(value) or not callable(value):
                continue
            if isinstance(value, type) and issubclass(value, BaseException):
                continue  # `except torch.cuda.OutOfMemoryError:` must keep working
            if str(getattr(value, "__module__", "")).startswith("torch.cuda"):
                self.patch(cuda, name, self._unmapped(name, value))
                self.unmapped.append(name)

    def _amp(self) -> None:
        redirect = self
        autocast = torch.amp.autocast_mode.autocast
        autocast_init = autocast.__init__

        def autocast_init_redirected(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
            autocast_init(self, redirect.device_type(device_type), *args, **kwargs)

        self.patch(autocast, "__init__", functools.wraps(autocast_init)(autocast_init_redirected))
        scaler = torch.amp.grad_scaler.GradScaler
        scaler_init = scaler.__init__

        def scaler_init_redirected(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
            scaler_init(self, redirect.device_type(device), *args, **kwargs)

        self.patch(scaler, "__init__", functools.wraps(scaler_init)(scaler_init_redirected))
        for name in AUTOCAST_QUERIES:
            query = getattr(torch, name)

            def mapped_query(*args: Any, _query: Any = query, **kwargs: Any) -> Any:
                return _query(*(redirect.device_type(a) for a in args), **kwargs)

            self.patch(torch, name, functools.wraps(query)(mapped_query))

    def _distributed(self) -> None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        redirect = self
        init = dist.init_process_group

        @functools.wraps(init)
        def init_process_group(*args: Any, **kwargs: Any) -> None:
            asked = args[0] if args else kwargs.get("backend")
            if isinstance(asked, str) and "nccl" in asked.lower():
                args, kwargs = args[1:], {**kwargs, "backend": redirect.dist_backend}
                if redirect.init_method != "env://" and "store" not in kwargs:
                    kwargs.setdefault("init_method", redirect.init_method)
            if "device_id" in kwargs:
                kwargs["device_id"] = redirect.device(kwargs["device_id"], ints=True) if redirect.indexed else None
            init(*args, **kwargs)

        self.patch(dist, "init_process_group", init_process_group)
        self.patch(dist, "is_nccl_available", lambda: bool(dist.is_backend_available(redirect.dist_backend)))
        ddp_init = DistributedDataParallel.__init__

        def ddp_init_redirected(
            self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *args: Any, **kwargs: Any
        ) -> None:
            if device_ids is not None:
                device_ids = [redirect.device(d, ints=True) for d in device_ids] if redirect.indexed else None
            if output_device is not None:
                output_device = redirect.device(output_device, ints=True) if redirect.indexed else None
            ddp_init(self, module, device_ids, output_device, *args, **kwargs)

        self.patch(DistributedDataParallel, "__init__", functools.wraps(ddp_init)(ddp_init_redirected))

    def report(self) -> str:
        """One line: what now runs where."""
        return (
            f"anydevice: cuda-compat: CUDA calls run on {self.backend.name} ({self.target}): .cuda(), "
            f"device='cuda' in {len(FACTORIES)} torch functions, .to() and Tensor.new_*, torch.cuda.* "
            f"({len(MAPPED)} functions through ad.device_module(); {len(self.unmapped)} others warn when called), "
            f"torch.autocast('cuda') and torch.cuda.amp, init_process_group('nccl') -> '{self.dist_backend}'."
        )


def install(backend: Backend, device_module: Any) -> CudaRedirect | None:
    """Redirect CUDA calls to ``backend``'s device; None (nothing patched) when it is cuda itself."""
    if backend.shims.placement.device_type == "cuda":
        return None
    redirect = CudaRedirect(backend, device_module)
    try:
        redirect.install()
    except BaseException:
        redirect.restore()
        raise
    return redirect


def write(line: str) -> None:
    """Write one report line to stderr."""
    sys.stderr.write(line + "\n")
