"""Hugging Face Transformers, Trainer and Accelerate follow ``ANYDEVICE``.

Under ``anydevice run`` nothing is needed in the script. Started another way (``python
train.py``, a notebook), import this module before transformers, accelerate or diffusers::

    import anydevice.integrations.transformers  # noqa: F401  (first: sets what they read at import)
    from transformers import Trainer, TrainingArguments

What it does:

* sets the variables Accelerate and Transformers read at import (``USE_TORCH_XLA``,
  ``ACCELERATE_USE_CPU``), computed from the selected device's placement shim: Trainer then
  trains on the selected device, and under ``anydevice run -n N`` Accelerate forms one group of
  N (on cpu it needs ``ACCELERATE_USE_CPU`` for that, or each rank trains alone);
* replaces Trainer's ``optim="adamw_torch_fused"`` (the default on torch >= 2.8) by ``"adamw_torch"``
  on a device without fused optimizer kernels (torch_xla), saying so once on stderr;
* makes ``from_pretrained(device_map="auto")`` place the model on the selected device (this
  process's, local-rank aware; Accelerate's own sharding where it counts the device type and
  several are visible to one process): :func:`auto_device_map`;
* :func:`device_map` gives ``from_pretrained(device_map=...)`` this process's device explicitly.
"""

from __future__ import annotations

from anydevice.integrations._hf import (
    FUSED,
    UNFUSED,
    WATCHED,
    apply_environment,
    auto_device_map,
    device_map,
    environment,
    fix_optimizer,
    fused_optimizer_supported,
    install,
    install_import_hook,
)

__all__ = [
    "FUSED",
    "UNFUSED",
    "WATCHED",
    "apply_environment",
    "auto_device_map",
    "device_map",
    "environment",
    "fix_optimizer",
    "fused_optimizer_supported",
    "install",
    "install_import_hook",
]

install()
