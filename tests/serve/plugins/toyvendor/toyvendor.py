"""A vendor's platform plugins for the ``toy`` device (tests/plugins/anydevice_toydevice): vLLM and SGLang.

Like a real vendor plugin it returns its platform class when called, and here it always does (the
toy device is the host CPU), so without anydevice it wins over vLLM's own detection. Each call is
appended to the file named by ``TOYVENDOR_CALLS`` (when set), so tests can see that it ran.
"""

from __future__ import annotations

import os


def _record(engine: str) -> None:
    path = os.environ.get("TOYVENDOR_CALLS")
    if path:
        with open(path, "a") as f:
            f.write(f"{engine} {os.getpid()}\n")


def register_vllm() -> str:
    _record("vllm")
    return "toyvendor.ToyPlatform"


def register_sglang() -> str:
    _record("sglang")
    return "toyvendor.ToySRTPlatform"


def __getattr__(name: str) -> type:
    """The platform classes, built on first use (importing this module imports neither engine)."""
    if name == "ToyPlatform":
        from vllm.platforms.cpu import CpuPlatform

        return type(
            "ToyPlatform", (CpuPlatform,), {"__module__": __name__, "__doc__": "vLLM's CPU platform, as the toy vendor's."}
        )
    if name == "ToySRTPlatform":
        from sglang.srt.platforms.cpu import CpuSRTPlatform

        return type(
            "ToySRTPlatform",
            (CpuSRTPlatform,),
            {"__module__": __name__, "__doc__": "SGLang's CPU platform, as the toy vendor's."},
        )
    raise AttributeError(name)
