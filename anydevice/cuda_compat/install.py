"""Putting cuda-compat in place for one selected backend, and taking it out again."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch

from anydevice.cuda_compat import runtime, tensor_parallel, torch_cuda
from anydevice.cuda_compat.redirect import CUDA, Redirect
from anydevice.cuda_compat.scope import ImportHook, installed_hook

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend


def install(backend: Backend, device_module: Any) -> Redirect | None:
    """Redirect CUDA calls to ``backend``'s device; None (nothing patched) when it is cuda itself."""
    if backend.shims.placement.device().type == CUDA:
        return None
    redirect = Redirect(backend, device_module)
    try:
        # shared by everyone: each maps only arguments that name CUDA
        redirect.install_devices()
        runtime.install_amp(redirect)
        runtime.install_distributed(redirect)
        runtime.install_pinned_memory(redirect)
        runtime.install_optimizers(redirect)
        runtime.install_share_memory(redirect)
        # the script's view: torch.cuda and torch.accelerator answer for the device
        scope = redirect.scope
        cuda = scope.add_view(torch.cuda, torch_cuda.cuda_view(redirect))
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None:
            scope.add_view(accelerator, torch_cuda.accelerator_view(redirect))
        questions = {"get_device_module": torch_cuda.get_device_module_view(redirect, cuda)}
        views = {**redirect.script_view(), **runtime.compile_view(redirect), **runtime.lazy_view(redirect), **questions}
        scope.add_view(torch, views)
        scope.add_view(torch.utils, {})
        scope.later["torch.utils.cpp_extension"] = runtime.extensions_view(redirect)
        parallel_view = tensor_parallel.view(redirect)
        if parallel_view is not None:  # DTensor's parallelize_module lowered to SPMD (xla)
            scope.later["torch.distributed.tensor"] = lambda module: {}
            scope.later[tensor_parallel.MODULE] = parallel_view
        scope.make_later_views()
        scope.attach_all()  # torch.cuda, torch.accelerator, torch.distributed in the view of torch
        hook = installed_hook() or ImportHook(lambda: None)
        hook.scope = scope
        hook.install()
        scope.rebind(list(sys.modules.values()))
    except BaseException:
        uninstall(redirect)
        raise
    return redirect


def uninstall(redirect: Redirect) -> None:
    """Undo every patch and give modules that hold a view the real module back."""
    redirect.patches.restore()
    hook = installed_hook()
    if hook is not None and hook.scope is redirect.scope:
        hook.scope = None
        hook.waiting = False
    redirect.scope.unbind(list(sys.modules.values()))


def summary(redirect: Redirect) -> str:
    """The one line said at start: cuda-compat is active, and on which device."""
    return (
        f"anydevice: cuda-compat is active: CUDA calls run on {redirect.name} ({redirect.target}); "
        "torch.device('cuda') still prints as cuda, tensors show the real device; the report of what changed comes at exit."
    )
