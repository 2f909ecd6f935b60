"""The probe worker: ``python -m anydevice.compat_matrix.worker`` runs probes and reports on stdout.

It reads one JSON request on stdin (``{"probes": [...], "seed": 0, "simulated": null}``),
selects the device the way any anydevice program does (``ANYDEVICE``), then runs the probes in
order, writing protocol lines (:func:`encode`). When selection fails it reports ``setup_error``
with a verdict: ``skip`` (the device is simply not here) or ``fail`` (the vendor stack is broken).
When the sanity probe fails it stops (``gated``).

The line protocol between the runner and its worker: the worker writes one message per line to
its stdout, a marker then a JSON object with a ``type``. Any other line (native code printing to
the same pipe) belongs to the probe that is running and goes into its log.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from typing import IO, Any, Final

MARKER: Final = "\x1e@anydevice-probe "


def encode(kind: str, **fields: Any) -> str:
    """One protocol line (with its newline)."""
    return MARKER + json.dumps({"type": kind, **fields}, default=str) + "\n"


def decode(line: str) -> dict[str, Any] | None:
    """The message in ``line``, or None when it is not a protocol line."""
    at = line.find(MARKER)
    if at < 0:
        return None
    try:
        message = json.loads(line[at + len(MARKER) :])
    except json.JSONDecodeError:
        return None
    return message if isinstance(message, dict) and "type" in message else None


_BROKEN_PROBLEMS = ("version_mismatch", "plugin_error")


class _Channel:
    """Protocol lines go to the original stdout; probes' own prints are captured separately."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def send(self, kind: str, **fields: Any) -> None:
        self.stream.write(encode(kind, **fields))
        self.stream.flush()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def base_env() -> dict[str, Any]:
    """What is known before torch is imported."""
    return {
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
        "anydevice": _version("anydevice") or "unknown",
        "ANYDEVICE": os.environ.get("ANYDEVICE"),
    }


def backend_env(backend: Any) -> dict[str, Any]:
    """The selected backend described for the result file."""
    vendor_package = None
    unsupported: dict[str, str] = {}
    try:
        from anydevice.registry import get_registry

        spec = get_registry().get(backend.name).spec
        vendor_package = spec.vendor_package
        unsupported = {str(k): str(v) for k, v in spec.unsupported.items()}
    except Exception:  # descriptive only
        vendor_package = None
    versions = {str(k): str(v) for k, v in dict(backend.versions).items()}
    vendor_version = versions.get(vendor_package or "") or (_version(vendor_package) if vendor_package else None)
    return {
        "name": backend.name,
        "plugin": backend.plugin,
        "plugin_version": _version(backend.distribution) if getattr(backend, "distribution", None) else None,
        "device_type": backend.device_type,
        "chip": backend.chip,
        "count": backend.count,
        "versions": versions,
        "vendor_package": vendor_package,
        "vendor_version": vendor_version,
        "why": backend.why,
        "simulated": not getattr(backend, "verified_on_hardware", True),
        "memory_bytes": _host_memory() if backend.device_type == "cpu" else None,
        "unsupported": unsupported,
    }


def _host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _verdict(exc: BaseException) -> str:
    from anydevice.errors import AnyDeviceError, DeviceUnavailableError, PluginError

    if isinstance(exc, PluginError):
        return "fail"
    if isinstance(exc, DeviceUnavailableError) and exc.problem in _BROKEN_PROBLEMS:
        return "fail"
    return "skip" if isinstance(exc, AnyDeviceError) else "fail"


def main() -> int:
    """Run the requested probes; the exit code is 0 unless the worker itself broke."""
    channel = _Channel(os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8"))
    request = json.loads(sys.stdin.readline() or "{}")
    env = base_env()
    try:
        import torch

        env["torch"] = torch.__version__
        import anydevice as ad
    except BaseException as exc:
        channel.send("env", env=env)
        channel.send("setup_error", verdict="fail", exception_type=type(exc).__name__, message=f"{type(exc).__name__}: {exc}")
        return 0
    channel.send("env", env=env)
    try:
        backend = ad.backend()
        device = ad.device()
    except Exception as exc:
        channel.send("setup_error", verdict=_verdict(exc), exception_type=type(exc).__name__, message=str(exc))
        return 0
    described = backend_env(backend)
    channel.send("backend", backend=described)

    from anydevice.compat_matrix.catalog import SANITY_NAME, all_probes
    from anydevice.compat_matrix.execute import fallback_counter, run_probe
    from anydevice.compat_matrix.schema import Status

    problems: list[str] = []
    by_name = {p.name: p for p in all_probes(problems, modules=request.get("modules", []))}
    for problem in problems:
        channel.send("notice", message=problem)
    simulated = request.get("simulated")
    simulated = described["simulated"] if simulated is None else bool(simulated)
    fallbacks = fallback_counter(backend)
    for name in request.get("probes", []):
        probe = by_name.get(name)
        if probe is None:
            channel.send("missing", probe=name)
            continue
        channel.send("start", probe=name)
        result = run_probe(
            probe,
            ad,
            device,
            seed=int(request.get("seed", 0)),
            simulated=simulated,
            fallbacks=fallbacks,
            on_stage=lambda stage: channel.send("stage", stage=stage.value),
        )
        channel.send("result", result=result.model_dump(mode="json"))
        if name == SANITY_NAME and result.status not in (Status.PASS, Status.FALLBACK, Status.FAKE):
            channel.send("gated", reason=f"sanity probe {result.status.value}: {result.reason or ''}".strip())
            return 0
    channel.send("done")
    return 0


if __name__ == "__main__":
    from anydevice import startup

    startup.exempt()  # anydevice's own child: the cuda-compat start-up hook never enables here
    sys.exit(main())
