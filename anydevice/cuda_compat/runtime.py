"""The training-loop half of cuda-compat: pinned memory, optimizers, step boundaries, compile, amp, ``"nccl"``.

* **Pinned memory** where the device has none (cpu; devices that declare ``pin_memory`` unsupported,
  e.g. xla): ``Tensor.pin_memory()`` returns the tensor, ``is_pinned()`` is False and
  ``DataLoader(pin_memory=True)`` does not pin; one notice says so.
* **Fused optimizers** the device has no kernel for (``AdamW(fused=True)`` on xla) are built unfused, one notice.
* **Lazy devices** (xla): a step boundary (``ad.step()``) after every ``optimizer.step()``, whatever the
  script does, and before the next top-level forward after a backward no optimizer step ended (hand-written
  updates); a warning when backward passes pile up in one graph without a boundary.
* **torch.compile** without ``backend=`` on a lazy device uses the device's compile backend (openxla),
  in the script's view of torch.
* **amp**: ``torch.autocast("cuda")``, ``torch.cuda.amp``, ``GradScaler("cuda")`` -> the device's type.
* **distributed**: ``init_process_group("nccl")`` -> the device's backend (the script's view of
  ``torch.distributed``), with the reduce ops that backend lacks translated (``ReduceOp.AVG`` as SUM then a
  divide); DDP ``device_ids`` where it takes them; ``DeviceMesh("cuda")``/``init_device_mesh("cuda")`` -> a
  mesh of the device's type (DTensor, tensor parallelism).
* **share_memory** of a tensor on a device whose tensors cannot live in shared host memory (xla): a
  clear refusal at the call instead of torch's raw error.

Patches shared with torch's own code map only arguments that name CUDA (and the device's own tensors
for ``share_memory``); everything else reaches the original with the same arguments.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from anydevice import settings
from anydevice.cuda_compat.migration_report import REDIRECTED, REFUSED
from anydevice.cuda_compat.redirect import CUDA, Redirect, same_builtin
from anydevice.errors import UnsupportedDeviceFunctionError

AUTOCAST_QUERIES = ("get_autocast_dtype", "is_autocast_enabled")
PILE_UP = 16
"""Backward passes traced without a step boundary before the lazy-device warning."""


def at_user_line(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` (torch's original, from a wrapper called by user code); a warning it shows at the wrapper's line
    is shown at the user's line instead (torch's ``stacklevel=2`` names its caller: the wrapper).

    Only the display is rewritten (``warnings.showwarning`` for the call): the filters and their once-per-place
    registries are left alone, so no other warning of the program is shown again because of it.
    """
    user = sys._getframe(2)  # at_user_line <- wrapper <- user code
    previous = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if filename == __file__:
            filename, lineno, line = user.f_code.co_filename, user.f_lineno, None
        previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        return fn(*args, **kwargs)
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = previous


def install_pinned_memory(r: Redirect) -> None:
    """``pin_memory`` is a no-op (one notice) where the device has no pinned host memory."""
    if r.pinned_memory:
        return
    why = f"{r.name} has no pinned host memory"
    said = f"{why}: Tensor.pin_memory() returns the tensor itself and DataLoader(pin_memory=True) does not pin."

    def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        r.notice(said)
        r.neutral("Tensor.pin_memory()", "the tensor itself", why)
        return self

    def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
        return bool(r.neutral("Tensor.is_pinned()", False, why))

    r.patches.set(torch.Tensor, "pin_memory", pin_memory)
    r.patches.set(torch.Tensor, "is_pinned", is_pinned)
    from torch.utils.data import DataLoader

    init = DataLoader.__init__
    position = list(inspect.signature(init).parameters).index("pin_memory") - 1  # without self

    @functools.wraps(init)
    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        elif len(args) > position and args[position]:
            args = (*args[:position], False, *args[position + 1 :])
        else:
            return init(self, *args, **kwargs)
        r.notice(said)
        r.neutral("DataLoader(pin_memory=True)", "pin_memory=False", why)
        kwargs.pop("pin_memory_device", None)
        return init(self, *args, **kwargs)

    r.patches.set(DataLoader, "__init__", loader_init)


def install_optimizers(r: Redirect) -> None:
    """Fused options the device rejects are dropped; lazy devices get a step boundary per optimizer step."""
    from anydevice.runtime import optimizers

    for cls in vars(torch.optim).values():
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or "__init__" not in vars(cls):
            continue
        if "fused" not in inspect.signature(cls.__init__).parameters:
            continue
        r.patches.set(cls, "__init__", _unfused(r, cls, cls.__init__, optimizers))
    if r.lazy:
        _step_boundaries(r)


def _unfused(r: Redirect, cls: type, init: Any, optimizers: Any) -> Any:
    name = cls.__name__

    @functools.wraps(init)
    def optimizer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        trial = r.target.type in optimizers.trying  # the support check's own fused step
        if not kwargs.get("fused") or trial:
            return init(self, *args, **kwargs)  # type: ignore[no-any-return]  # the wrapped __init__ is untyped
        params = list(args[0] if args else kwargs.pop("params"))  # a generator is read once: pass the list on
        args = (params, *args[1:])
        on_target = r.target.type in _devices_of(params)  # parameters on the CPU keep torch's fused CPU kernels
        if on_target and not optimizers.fused_optimizer_supported(r.target):
            kwargs["fused"] = None
            r.notice(f"{name}(fused=True) has no fused kernel on {r.name}: using {name}'s default implementation.")
            r.report.add(f"torch.optim.{name}(fused=True)", REDIRECTED, f"{name}(fused=None): no fused kernel on {r.name}")
        init(self, *args, **kwargs)

    return optimizer_init


def _devices_of(params: list[Any]) -> set[str]:
    """The device types of an optimizer's parameters (tensors, or param groups with ``"params"``)."""
    found: set[str] = set()
    for item in params:
        group = item.get("params", ()) if isinstance(item, dict) else (item,)
        for tensor in [group] if isinstance(group, torch.Tensor) else group:
            if isinstance(tensor, torch.Tensor):
                found.add(tensor.device.type)
    return found


def _step_boundaries(r: Redirect) -> None:
    """``ad.step()`` after every ``optimizer.step()``, and before the next top-level forward after a backward that no
    optimizer step ended (a loop that updates parameters by hand: ``p.data.add_(p.grad, alpha=-lr)``); warn once when
    backward passes pile up without one.

    The forward boundary is placed only where it is safe: a module's forward that starts while no other forward runs,
    outside ``torch.compile`` tracing and outside a backward (checkpointing re-runs forwards there). A boundary only
    cuts the traced graph where values are already computed, so the numbers are those without it.
    """
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    placement = r.placement
    pending = [0]  # backward passes since the last boundary
    depth = [0]  # forwards running (top-level: 0 before the pre-hook)
    backward_running = [0]

    def boundary(optimizer: Any, args: Any, kwargs: Any) -> None:
        pending[0] = 0
        r.report.add("optimizer.step()", REDIRECTED, f"then ad.step(): {r.name} runs the traced step as one graph")
        placement.step()

    def before_forward(module: Any, args: Any) -> None:
        depth[0] += 1
        if pending[0] and depth[0] == 1 and not backward_running[0] and not torch.compiler.is_compiling():
            pending[0] = 0
            r.report.add(
                "a backward without optimizer.step()",
                REDIRECTED,
                f"ad.step() before the next forward: {r.name} runs each hand-written update as one graph",
            )
            _in_parts(placement.materialize, args)
            placement.step()

    def after_forward(module: Any, args: Any, output: Any) -> None:
        depth[0] = max(depth[0] - 1, 0)

    r.patches.handles.append(register_optimizer_step_post_hook(boundary))
    r.patches.handles.append(register_module_forward_pre_hook(before_forward))
    r.patches.handles.append(register_module_forward_hook(after_forward, always_call=True))
    backward: Callable[..., None] = torch.Tensor.backward

    @functools.wraps(backward)
    def counted_backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        backward_running[0] += 1
        try:
            backward(self, *args, **kwargs)
        finally:
            backward_running[0] -= 1
        pending[0] += 1
        if pending[0] == PILE_UP:
            r.notice(
                f"{PILE_UP} backward passes were traced into one {r.name} graph without a step boundary (no optimizer.step() "
                "and no module forward between them); a graph this large compiles slowly and can exhaust memory. Call "
                "torch.accelerator.synchronize() or ad.step() where a step ends."
            )

    r.patches.set(torch.Tensor, "backward", counted_backward)


def _in_parts(materialize: Callable[[list[torch.Tensor]], None], args: Any) -> None:
    """Before a boundary at a forward: its inputs on their own first, so the step's graph takes them as data.

    Only the inputs: parameters updated in place are not computed apart from the step (torch_xla aliases their buffers
    to the step's outputs; a tensor traced from their old values would lose its data)."""
    flat = args if isinstance(args, (tuple, list)) else (args,)
    tensors = [t for item in flat for t in (item if isinstance(item, (tuple, list)) else (item,)) if isinstance(t, torch.Tensor)]
    if tensors:
        materialize(tensors)


def compile_view(r: Redirect) -> dict[str, Any]:
    """The script's ``torch.compile`` (without ``backend=`` on a lazy device: the device's compiler) and autocast queries."""
    view = _autocast_queries(r)
    backend = r.backend.shims.compilation.backend
    if not r.lazy or not isinstance(backend, str):
        return view
    compile_ = torch.compile

    @functools.wraps(compile_)
    def compile_on_device(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if "backend" not in kwargs and len(args) < 2 and _on_device(model, r.target.type):
            kwargs["backend"] = backend
            kwargs.setdefault("dynamic", False)
            r.report.add("torch.compile()", REDIRECTED, f"backend={backend!r} (the {r.name} compiler)")
        return compile_(model, *args, **kwargs)

    view["compile"] = compile_on_device
    return view


def lazy_view(r: Redirect) -> dict[str, Any]:
    """On a lazy device, the script's ``torch.inference_mode()`` is ``torch.no_grad()`` (torch_xla's tensors cannot be
    inference tensors: "Cannot set version_counter for inference tensor"); the numbers are the same, as no grad is kept."""
    if not r.lazy:
        return {}
    original = torch.inference_mode

    @functools.wraps(original)
    def inference_mode(mode: Any = True) -> Any:
        if not isinstance(mode, bool):  # @torch.inference_mode without parentheses
            r.report.add("torch.inference_mode()", REDIRECTED, f"torch.no_grad() ({r.name} has no inference tensors)")
            return torch.no_grad()(mode)
        if not mode:
            return original(False)
        r.report.add("torch.inference_mode()", REDIRECTED, f"torch.no_grad() ({r.name} has no inference tensors)")
        return torch.no_grad()

    return {"inference_mode": inference_mode}


def _on_device(model: Any, device_type: str) -> bool:
    """Whether ``model`` is a module whose parameters are on ``device_type`` (what inductor cannot compile)."""
    if not isinstance(model, torch.nn.Module):
        return False
    first = next(iter(model.parameters()), None)
    return first is not None and first.device.type == device_type


def install_amp(r: Redirect) -> None:
    """``autocast("cuda")``, ``torch.cuda.amp``, ``GradScaler("cuda")`` and the autocast queries -> the device's type."""
    autocast = torch.amp.autocast_mode.autocast
    autocast_init = autocast.__init__
    target = r.target.type

    def autocast_init_redirected(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == CUDA:
            r.report.add("torch.autocast('cuda')", REDIRECTED, f"torch.autocast({target!r})")
        at_user_line(autocast_init, self, r.device_type(device_type), *args, **kwargs)

    r.patches.set(autocast, "__init__", functools.wraps(autocast_init)(autocast_init_redirected))
    scaler = torch.amp.grad_scaler.GradScaler
    scaler_init = scaler.__init__

    def scaler_init_redirected(self: Any, device: str = CUDA, *args: Any, **kwargs: Any) -> None:
        if device == CUDA:
            r.report.add("GradScaler('cuda')", REDIRECTED, f"GradScaler({target!r})")
        at_user_line(scaler_init, self, r.device_type(device), *args, **kwargs)

    r.patches.set(scaler, "__init__", functools.wraps(scaler_init)(scaler_init_redirected))


def _autocast_queries(r: Redirect) -> dict[str, Any]:
    """``torch.is_autocast_enabled("cuda")`` and ``torch.get_autocast_dtype("cuda")`` ask about the device."""
    view: dict[str, Any] = {}
    for name in AUTOCAST_QUERIES:
        query = getattr(torch, name, None)
        if query is None:
            continue

        def mapped_query(*args: Any, _query: Any = query, **kwargs: Any) -> Any:
            return _query(*(r.device_type(a) for a in args), **kwargs)

        view[name] = same_builtin(query, functools.wraps(query)(mapped_query))
    return view


def install_distributed(r: Redirect) -> None:
    """``init_process_group("nccl")`` -> the device's backend (script's view); DDP ``device_ids`` -> what the device takes."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    init = dist.init_process_group

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        asked = args[0] if args else kwargs.get("backend")
        if isinstance(asked, str) and "nccl" in asked.lower():
            r.report.add(f"init_process_group({asked!r})", REDIRECTED, repr(r.dist_backend))
            args, kwargs = args[1:], {**kwargs, "backend": r.dist_backend}
            if r.init_method != "env://" and "store" not in kwargs:
                kwargs.setdefault("init_method", r.init_method)
        if "device_id" in kwargs:
            mapped = r.device(kwargs["device_id"], ints=True)
            if mapped is not kwargs["device_id"]:
                kwargs["device_id"] = mapped if r.indexed else None
        init(*args, **kwargs)

    def is_nccl_available() -> bool:
        r.report.add("dist.is_nccl_available()", REDIRECTED, f"whether {r.dist_backend!r} is available")
        return bool(dist.is_backend_available(r.dist_backend))

    view = {"init_process_group": init_process_group, "is_nccl_available": is_nccl_available, **_reductions(r, dist)}
    r.scope.add_view(dist, view)
    ddp_init = DistributedDataParallel.__init__

    def ddp_init_redirected(
        self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        if device_ids is not None:
            r.report.add("DistributedDataParallel(device_ids=...)", REDIRECTED, "the device's ids" if r.indexed else "None")
            device_ids = [r.device(d, ints=True) for d in device_ids] if r.indexed else None
        if output_device is not None:
            output_device = r.device(output_device, ints=True) if r.indexed else None
        at_user_line(ddp_init, self, module, device_ids, output_device, *args, **kwargs)
        if r.lazy and self.process_group.size() == 1:
            self.__dict__[ONE_RANK] = True
            r.report.add(
                "DistributedDataParallel (one rank)", REDIRECTED, "the module itself: a one-rank all-reduce is the identity"
            )

    r.patches.set(DistributedDataParallel, "__init__", functools.wraps(ddp_init)(ddp_init_redirected))
    r.patches.set(DistributedDataParallel, "forward", _one_rank_forward(DistributedDataParallel.forward))
    _device_mesh(r)


ONE_RANK = "_anydevice_one_rank"
"""Set on a ``DistributedDataParallel`` of a one-process world on a lazy device: its forward is its module's."""


def _one_rank_forward(forward: Callable[..., Any]) -> Callable[..., Any]:
    """DDP's forward, except for a one-rank world on a lazy device (``anydevice run`` sets ``RANK``/``WORLD_SIZE`` for one
    process, as torchrun does, so llm.c-style scripts wrap their model): there the module's own forward.

    Averaging gradients over one rank is the identity, so the numbers are the same; what is skipped is DDP's reducer,
    which copies every gradient into buckets and back (extra traced ops every step, and a changed graph when it
    rebuilds its buckets after the first iteration: a recompile), about 5x the step time on xla.
    """

    @functools.wraps(forward)
    def ddp_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        if self.__dict__.get(ONE_RANK):
            return self.module(*inputs, **kwargs)
        return forward(self, *inputs, **kwargs)

    return ddp_forward


def _device_mesh(r: Redirect) -> None:
    """``init_device_mesh("cuda", ...)``/``DeviceMesh("cuda", ...)`` -> a mesh of the selected device's type (DTensor and
    tensor parallelism take the type from the mesh, so torch's own code never reaches CUDA's ``set_device``)."""
    from torch.distributed.device_mesh import DeviceMesh

    mesh_init = DeviceMesh.__init__
    target = r.target.type
    collectives = r.backend.shims.collectives
    spmd = collectives.tensor_parallel == "spmd"

    def mesh_init_redirected(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == CUDA:
            r.report.add("DeviceMesh('cuda')", REDIRECTED, f"DeviceMesh({target!r})")
        asked = device_type in (CUDA, target)  # "cuda", or the type torch.accelerator names under compat
        one_process_spmd = asked and spmd and settings.world_size() == 1  # several processes: as they are
        if one_process_spmd:  # before the script's tensors: SPMD replicates those made earlier (and may crash on them)
            collectives.tensor_parallelism().world()
        at_user_line(mesh_init, self, r.device_type(device_type), *args, **kwargs)
        if asked and kwargs.get("_init_backend", True):
            _world_group(r, one_process_spmd)

    r.patches.set(DeviceMesh, "__init__", functools.wraps(mesh_init)(mesh_init_redirected))


def _world_group(r: Redirect, spmd: bool) -> None:
    """The default process group a ``DeviceMesh("cuda")`` makes, where torch's mesh of the device's type made none
    (torch/distributed/device_mesh.py skips process groups for some types): ``mesh.get_rank()`` then answers.

    Under SPMD the one process is the whole world: a one-rank CPU group (the device's own backend refuses SPMD)."""
    import torch.distributed

    dist: Any = torch.distributed  # HashStore is missing from its stubs' exports
    if dist.is_initialized():
        return
    call = "DeviceMesh: the world process group"
    if spmd:
        r.report.add(call, REDIRECTED, "'gloo', one rank (SPMD: one process drives every device)")
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        r.report.add(call, REDIRECTED, repr(r.dist_backend))
        dist.init_process_group(backend=r.dist_backend, init_method=r.init_method)


REDUCTIONS = {"all_reduce": 0, "reduce": 0, "reduce_scatter_tensor": 0, "reduce_scatter": 0}
"""Collectives with an ``op=`` (the script's view): position of the tensor whose result is divided for an average."""


def _reductions(r: Redirect, dist: Any) -> dict[str, Callable[..., Any]]:
    """``ReduceOp.AVG`` where the renamed backend lacks it (``Collectives.lacking_reduce_ops``; torch_xla's): SUM, then a divide.

    Any other op the backend lacks is refused at the call, naming the backend and the ops it has.
    """
    lacking = r.backend.shims.collectives.lacking_reduce_ops
    if not lacking:
        return {}
    view: dict[str, Callable[..., Any]] = {}

    def lacked(op: Any) -> str | None:
        return next((name for name in sorted(lacking) if op == getattr(dist.ReduceOp, name, None)), None)

    def translated(name: str, collective: Callable[..., Any]) -> Callable[..., Any]:
        parameters = list(inspect.signature(collective).parameters)
        op_at, group_at = parameters.index("op"), parameters.index("group")
        result_at = REDUCTIONS[name]

        @functools.wraps(collective)
        def reduction(*args: Any, **kwargs: Any) -> Any:
            op = kwargs.get("op", args[op_at] if len(args) > op_at else None)
            missing = lacked(op)
            if missing is None:
                return collective(*args, **kwargs)
            if missing != "AVG":
                reason = f"the {r.dist_backend!r} process group has no ReduceOp.{missing}"
                r.report.add(f"dist.{name}(op=ReduceOp.{missing})", REFUSED, reason)
                raise UnsupportedDeviceFunctionError(f"torch.distributed.{name}(op=ReduceOp.{missing})", r.name, reason)
            if len(args) > op_at:
                args = (*args[:op_at], dist.ReduceOp.SUM, *args[op_at + 1 :])
            else:
                kwargs["op"] = dist.ReduceOp.SUM
            how = f"ReduceOp.SUM, then a divide by the group size ({r.dist_backend!r})"
            r.report.add(f"dist.{name}(op=ReduceOp.AVG)", REDIRECTED, how)
            work = collective(*args, **kwargs)
            if work is not None:
                work.wait()
            group = kwargs.get("group", args[group_at] if len(args) > group_at else None)
            if name == "reduce" and not _is_destination(dist, group, args, kwargs):
                return work  # only the destination receives the reduction
            result = args[result_at] if args else kwargs[parameters[result_at]]
            for tensor in result if isinstance(result, (list, tuple)) else [result]:
                tensor.div_(dist.get_world_size(group))
            return work

        return reduction

    for name in REDUCTIONS:
        collective = getattr(dist, name, None)
        if collective is not None:
            view[name] = translated(name, collective)
    return view


def _is_destination(dist: Any, group: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether this rank is ``dist.reduce``'s destination (``dst``, a global rank, or ``group_dst``)."""
    if kwargs.get("group_dst") is not None:
        return bool(dist.get_rank(group) == kwargs["group_dst"])
    dst = kwargs.get("dst", args[1] if len(args) > 1 else None)
    return dst is None or dist.get_rank() == dst


def install_share_memory(r: Redirect) -> None:
    """``Tensor.share_memory_()``/``Module.share_memory()`` on a lazy device's tensors: one clear refusal."""
    if not r.lazy:
        return
    share = torch.Tensor.share_memory_
    device_type = r.target.type
    reason = f"{r.name} tensors live in the device runtime, not in host memory that processes can share"
    fix = (
        "Share the model before moving it (model.share_memory() on the CPU, then .to() in each process), "
        "or use torch.distributed (DDP) instead of Hogwild-style shared parameters."
    )

    @functools.wraps(share)
    def share_memory_(self: torch.Tensor) -> torch.Tensor:
        if self.device.type == device_type:
            r.report.add("Tensor.share_memory_()", REFUSED, reason)
            raise UnsupportedDeviceFunctionError("Tensor.share_memory_() (model.share_memory())", r.name, reason, fix)
        return share(self)  # type: ignore[no-untyped-call,no-any-return]  # the original share_memory_ is untyped

    r.patches.set(torch.Tensor, "share_memory_", share_memory_)


def extensions_view(r: Redirect) -> Callable[[Any], dict[str, Any]]:
    """The script's ``torch.utils.cpp_extension``: building CUDA sources is refused at the call (no CUDA compiler target)."""
    reason = "CUDA kernels are compiled for NVIDIA GPUs only"
    fix = "Use the extension's CPU implementation (many ship one beside the CUDA one), or run with ANYDEVICE=cuda."

    def refuse(call: str) -> None:
        r.report.add(call, REFUSED, reason)
        raise UnsupportedDeviceFunctionError(call, r.name, reason, fix)

    def cuda_files(sources: Any) -> bool:
        files = [sources] if isinstance(sources, str) else list(sources or ())
        return any(str(f).endswith((".cu", ".cuh")) for f in files)

    def view(extension: Any) -> dict[str, Any]:
        def load(name: str, sources: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("with_cuda") or cuda_files(sources):
                refuse("torch.utils.cpp_extension.load(<CUDA sources>)")
            return extension.load(name, sources, *args, **kwargs)

        def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
            if cuda_sources or kwargs.get("with_cuda"):
                refuse("torch.utils.cpp_extension.load_inline(cuda_sources=...)")
            return extension.load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)

        def cuda_extension(name: str, sources: Any, *args: Any, **kwargs: Any) -> Any:
            refuse("torch.utils.cpp_extension.CUDAExtension()")

        return {
            "load": functools.wraps(extension.load)(load),
            "load_inline": functools.wraps(extension.load_inline)(load_inline),
            "CUDAExtension": functools.wraps(extension.CUDAExtension)(cuda_extension),
        }

    return view
