"""Hugging Face tests need transformers/accelerate/diffusers (main and XLA lanes); other lanes do not collect them."""

import importlib.util

_HF = all(importlib.util.find_spec(m) for m in ("transformers", "accelerate", "diffusers"))
collect_ignore_glob = [] if _HF else ["test_*.py"]
