"""Stands in for vllm-torchtpu's platform plugin (entry point ``torchtpu`` in ``vllm.platform_plugins``).

Like the real one (vllm-torchtpu 0.29), its register function returns the platform class without a
hardware check. Each call is appended to the file named by ``TORCHTPU_CALLS`` (when set), so tests
can see whether it was asked. The platform class is never built here (no vLLM in the test lanes).
"""

from __future__ import annotations

import os


def register() -> str:
    path = os.environ.get("TORCHTPU_CALLS")
    if path:
        with open(path, "a") as f:
            f.write(f"torchtpu {os.getpid()}\n")
    return "vllm_torchtpu.platform.TorchTpuPlatform"
