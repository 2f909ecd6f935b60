"""A second vendor's vLLM platform plugin: installed next to another one, it is what `anydevice doctor` warns about."""

from __future__ import annotations


def register_vllm() -> None:
    """No device of this vendor here (what a real plugin answers on a machine without its chip)."""
    return None
