"""Which optimizer implementations a device runs: shared by cuda-compat and the Trainer integration."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_fused_ok: dict[str, bool] = {}
trying: set[str] = set()
"""Device types whose fused trial step is running (cuda-compat's optimizer patch leaves that one alone)."""


def fused_optimizer_supported(device: torch.device) -> bool:
    """Whether ``torch.optim.AdamW(fused=True)`` steps on ``device`` (tried once per device type)."""
    import torch

    if device.type not in _fused_ok:
        trying.add(device.type)
        param = torch.zeros(1, device=device, requires_grad=True)
        param.grad = torch.zeros_like(param)
        try:
            torch.optim.AdamW([param], fused=True).step()
            _fused_ok[device.type] = True
        except RuntimeError:  # "`fused=True` requires all the params to be ... Tensors of supported devices"
            _fused_ok[device.type] = False
        finally:
            trying.discard(device.type)
    return _fused_ok[device.type]
