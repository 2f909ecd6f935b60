"""The child side of vetting third-party plugins (:mod:`anydevice.runtime.isolation` is the parent side).

``python -m anydevice.runtime.vet_child`` reads the plugins to try from stdin, imports each and runs its
registration hook (each a step under the deadline), then runs every device's detection, and reports
each step as one JSON line on its original stdout. It is the only place besides the registry itself
that builds a registry (of the built-in devices, for a hook that asks for the devices).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from typing import Any

from anydevice.contract.device_spec import Detection
from anydevice.runtime.isolation import detection_fields
from anydevice.runtime.untrusted import clean_detection, count_problem


def _child() -> int:
    """Import, register and detect every requested plugin, one JSON line per step on the original stdout.

    Detections run concurrently in daemon threads, all within one deadline (a Python-level hang is
    reported by the child itself); with ``sequential`` one after the other, each its own step (after a
    child was killed with several in flight, this tells which one held the GIL).
    """
    events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # the plugins' own output (print, C printf) goes where stderr goes, never into the events
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read())
    sys.path[:] = list(request["path"])
    lock = threading.Lock()

    def emit(**event: Any) -> None:
        with lock:
            events.write(json.dumps(event, default=str) + "\n")

    _warm_up()
    emit(e="ready")
    deadline = float(request["deadline"])
    pending: list[tuple[str, Any]] = []
    for plugin in request["plugins"]:
        specs = _import_and_register(plugin["name"], plugin["value"], emit)
        pending += [(plugin["name"], spec) for spec in specs if spec.name not in plugin["skip"]]
    if request.get("sequential"):
        for plugin, spec in pending:
            emit(e="start", plugin=plugin, stage="detect", device=spec.name)
            emit(e="detected", plugin=plugin, device=spec.name, **_detect(spec))
    elif pending:
        emit(e="start", stage="detect-all", devices=[[plugin, spec.name] for plugin, spec in pending])
        _detect_all(pending, deadline, emit)
    for plugin in request["plugins"]:
        emit(e="end", plugin=plugin["name"])
    emit(e="done")
    events.flush()
    os._exit(0)  # a plugin's non-daemon threads or atexit handlers must not hold the child


def _warm_up() -> None:
    """Import and build what checking a plugin needs, so that its cost is not charged to the first plugin's deadline."""
    import pluggy  # noqa: F401

    from anydevice.contract.device_spec import detection_problems

    detection_problems(Detection.ok("warm-up"))


def _import_and_register(name: str, value: str, emit: Any) -> list[Any]:
    """Import one plugin and run its registration hook; its valid device declarations (none after a failure)."""
    from importlib import metadata

    import pluggy

    from anydevice.contract import hookspecs
    from anydevice.contract.device_spec import DeviceSpec, is_valid_name
    from anydevice.runtime.guard import describe
    from anydevice.runtime.registry import ENTRY_POINT_GROUP, load_entry_point

    emit(e="start", plugin=name, stage="import")
    try:
        module = load_entry_point(metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP))
    except BaseException as exc:
        emit(e="failed", plugin=name, stage="import", error=describe(exc))
        return []
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    try:
        pm.register(module, name=name)
    except BaseException:  # the parent validates the hooks and reports; nothing to run here
        emit(e="registered", plugin=name)
        return []
    specs: list[object] = []
    for impl in pm.hook.anydevice_register_devices.get_hookimpls():
        emit(e="start", plugin=name, stage="register")
        try:
            wants = {"registry": _builtin_registry()} if "registry" in impl.argnames else {}
            impl.function(register=specs.append, **wants)
        except BaseException as exc:
            emit(e="failed", plugin=name, stage="register", error=describe(exc))
            return []
    valid = [s for s in specs if isinstance(s, DeviceSpec) and is_valid_name(s.name)]  # the parent refuses the rest
    values: dict[str, str | None] = {}
    for spec in valid:
        if isinstance(spec.environment, tuple):
            values.update({v: os.environ.get(v) for v in spec.environment if isinstance(v, str)})
    emit(e="registered", plugin=name, values=values)
    return valid


@functools.cache
def _builtin_registry() -> Any:
    """For a plugin whose registration hook takes the devices: a read-only view of the built-in ones (no third party here)."""
    from anydevice.runtime.registry import builtin_registry

    return builtin_registry().view()


def _detect(spec: Any) -> dict[str, Any]:
    """One device's detection as the fields of a ``detected`` event."""
    from anydevice.contract.device_spec import detection_problems
    from anydevice.runtime.guard import describe

    try:
        result = spec.detect()
    except SystemExit as exc:
        return {"kind": "exit", "error": describe(exc)}
    except BaseException as exc:
        return {"kind": "raised", "error": describe(exc)}
    if not isinstance(result, Detection):
        return {"kind": "raised", "error": f"TypeError: detect() returned {type(result).__name__}, not Detection"}
    problems = detection_problems(result)
    problems += [problem] if not problems and (problem := count_problem(result.count)) else []
    if problems:
        return {"kind": "invalid", "error": "; ".join(problems)}
    return {"detection": detection_fields(clean_detection(result))}


def _detect_all(pending: list[tuple[str, Any]], deadline: float, emit: Any) -> None:
    """Every detection at once, in daemon threads; each reported when it ends, the rest at the deadline."""
    done: set[int] = set()

    def run(index: int, plugin: str, spec: Any) -> None:
        fields = _detect(spec)
        with lock:
            if index in done:
                return
            done.add(index)
        emit(e="detected", plugin=plugin, device=spec.name, **fields)

    lock = threading.Lock()
    threads = [
        threading.Thread(target=run, args=(i, plugin, spec), daemon=True, name=f"anydevice-detect-{plugin}")
        for i, (plugin, spec) in enumerate(pending)
    ]
    for thread in threads:
        thread.start()
    until = time.monotonic() + deadline
    for thread in threads:
        thread.join(max(until - time.monotonic(), 0.0))
    for i, (plugin, spec) in enumerate(pending):
        with lock:
            if i in done:
                continue
            done.add(i)
        emit(e="detected", plugin=plugin, device=spec.name, kind="timeout", error=f"did not finish within {deadline:g} s")


if __name__ == "__main__":
    raise SystemExit(_child())
