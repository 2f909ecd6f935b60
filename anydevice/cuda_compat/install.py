"""Putting cuda-compat in place for one selected backend, and taking it out again."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch

from anydevice.cuda_compat import accelerator as agnostic
from anydevice.cuda_compat import runtime, tensor_parallel, torch_cuda
from anydevice.cuda_compat.redirect import CUDA, Redirect
from anydevice.cuda_compat.scope import ImportHook, installed_hook

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend


def install(backend: Backend, device_module: Any, cuda: bool = True) -> Redirect | None:
    """Redirect CUDA calls to ``backend``'s device; None (nothing patched) when it is cuda itself.

    ``cuda=False`` (:mod:`.accelerator`, ``anydevice run`` without ``--cuda-compat``): the same redirect, with only the
    device-agnostic half in place: ``torch.accelerator``, ``torch.get_device_module``, a lazy device's generators,
    ``inference_mode`` and step boundaries answer for the device; nothing that names CUDA is mapped.
    """
    if backend.shims.placement.device().type == CUDA:
        return None
    redirect = Redirect(backend, device_module, cuda=cuda)
    try:
        if cuda:  # shared by everyone: each maps only arguments that name CUDA
            redirect.install_devices()
            runtime.install_amp(redirect)
            runtime.install_distributed(redirect)
            runtime.install_pinned_memory(redirect)
        runtime.install_optimizers(redirect)
        runtime.install_share_memory(redirect)
        # the script's view: torch.cuda (cuda-compat) and torch.accelerator answer for the device
        scope = redirect.scope
        cuda_module = scope.add_view(torch.cuda, torch_cuda.cuda_view(redirect)) if cuda else torch.cuda
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None:
            answered = torch_cuda.accelerator_view(redirect)  # {} on the host: torch's own answers
            scope.add_view(accelerator, {**agnostic.extras(redirect, answered), **answered} if answered else {})
        questions = {"get_device_module": torch_cuda.get_device_module_view(redirect, cuda_module)}
        views = {**redirect.script_view(), **runtime.compile_view(redirect), **runtime.lazy_view(redirect), **questions}
        scope.add_view(torch, views)
        if cuda:
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
