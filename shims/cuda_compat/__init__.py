"""What ``anydevice.cuda_compat`` patches so that CUDA-written code runs on the selected device.

Why this design. A global "CUDA exists" answer is a lie torch's own code believes too: optimizers
probe CUDA graph capture, DataLoader pins through ``torch.accelerator``, dynamo saves the CUDA RNG,
inductor reads CUDA device properties, ``torch.load`` restores onto CUDA, and each then reaches
CUDA's own functions (raw driver errors on a CUDA build without a GPU). So, as Gaudi's GPU
migration and Ascend's ``transfer_to_npu`` do, every public ``torch.cuda`` name is mapped onto a
complete device module: answered by ``ad.device_module()``, answered with the value true on the
device, kept a class, or refused by name (:mod:`.torch_cuda`); CUDA's own implementation is never
called. The few availability questions (``is_available``, ``device_count``, ``is_initialized``,
``is_current_stream_capturing``, and ``torch.accelerator``'s) are answered per caller with one frame
read: torch's own modules get the truth (no CUDA here) and keep their CPU/XLA paths; the script and
its libraries get the selected device. Hot paths (``Tensor.to``, factories) read no frames.

Parts: :mod:`.redirect` (devices, ``.cuda()``, ``torch.load``), :mod:`.torch_cuda` (``torch.cuda.*``,
``torch.accelerator.*``), :mod:`.host_types` (Event, Stream, device, legacy tensor types),
:mod:`.runtime` (pinned memory, optimizers, lazy step boundaries, compile, amp, ``"nccl"``),
:mod:`.report` (the migration report). On cuda nothing is patched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anydevice.shims.cuda_compat.redirect import FACTORIES, Redirect

if TYPE_CHECKING:
    from anydevice.backend import Backend

__all__ = ["FACTORIES", "Redirect", "install"]


def install(backend: Backend, device_module: Any) -> Redirect | None:
    """Redirect CUDA calls to ``backend``'s device; None (nothing patched) when it is cuda itself."""
    if backend.shims.placement.device().type == "cuda":
        return None
    from anydevice.shims.cuda_compat import runtime, torch_cuda

    redirect = Redirect(backend, device_module)
    try:
        redirect.install_devices()
        torch_cuda.install_torch_cuda(redirect)
        torch_cuda.install_accelerator(redirect)
        runtime.install_amp(redirect)
        runtime.install_distributed(redirect)
        runtime.install_pinned_memory(redirect)
        runtime.install_optimizers(redirect)
        runtime.install_compile(redirect)
    except BaseException:
        redirect.restore()
        raise
    return redirect


def summary(redirect: Redirect) -> str:
    """The one line said at start: cuda-compat is active, and on which device."""
    return (
        f"anydevice: cuda-compat is active: CUDA calls run on {redirect.name} ({redirect.target}); "
        "torch.device('cuda') still prints as cuda, tensors show the real device; the report of what changed comes at exit."
    )
