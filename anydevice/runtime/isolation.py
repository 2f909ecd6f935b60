"""Third-party plugins' import, registration and detection, tried first in child processes.

In-process guarding (:mod:`anydevice.runtime.guard`) cannot stop C code that holds the GIL, a native
crash (SIGSEGV, ``abort``) or ``os._exit``. So before the registry imports a third-party plugin,
:func:`vet` runs every third-party plugin's import and registration hook (each a step under the
deadline) and then every device's detection (concurrently, within one deadline) in a child
process (``python -m anydevice.runtime.vet_child``); up to :data:`MAX_CHILDREN` children run at once, each
plugin in one of them, so ten slow plugins cost about one plugin's time, not their sum.
The child reports each step as a JSON line; when it hangs or dies, the step in progress is
charged to its plugin and a fresh child carries on with the steps left. The registry then imports
(all at once, each under its deadline) only the plugins a child imported cleanly, and takes their
detections from the child (the parent never runs third-party detection). Where no child can be started at
all, the registry falls back to its in-process guard (threads under the deadline).

The outcome is cached under ``ANYDEVICE_CACHE_DIR/plugins/``, keyed by the plugins'
distributions and versions, the modification time of each plugin's module file, the Python and
torch versions, the deadline, the variables the devices declare (plus ``ANYDEVICE_PLUGINS``,
``PATH``, ``LD_LIBRARY_PATH``), ``sys.path``, the user and the boot id: a later command with the
same key starts no child. Entries are read and written with :mod:`anydevice.files.safe_files`: only a
regular file of this user's (or root's) is read, and one that is malformed is detected again.
An outcome where a step hit the deadline is kept only :data:`RETRY_AFTER` seconds (the machine
may just have been busy).
Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from anydevice import settings
from anydevice.contract.device_spec import Detection
from anydevice.runtime.child import Child, ending

CACHE_VERSION: Final = 1
GRACE: Final = 2.0
"""Seconds past the deadline the parent waits for the child to report its own detection timeouts."""
RETRY_AFTER: Final = 600.0
"""Seconds a cached outcome with a deadline hit is kept; crashes and errors are kept until the key changes."""
MAX_CACHE_FILE: Final = 4 << 20
"""A cache entry larger than this is not read (a real one is a few kilobytes)."""
_DETECTION_FIELDS: Final = frozenset({"available", "reason", "fix", "problem", "count", "chip", "details"})
STARTUP_BUDGET: Final = 120.0
"""Seconds the child may take to start Python and import anydevice (not a plugin's fault, so not its deadline)."""
MAX_CHILDREN: Final = 16
"""Plugin check processes run at once; plugins beyond that share them (one child runs its plugins in turn)."""
KEY_VARIABLES: Final = ("ANYDEVICE_PLUGINS", "TORCH_DEVICE_BACKEND_AUTOLOAD", "PATH", "LD_LIBRARY_PATH")
"""Variables in the cache key besides those the devices declare (``DeviceSpec.environment``)."""


@dataclass(frozen=True)
class Plugin:
    """A third-party entry point to vet: its name, ``module:attr`` value and distribution."""

    name: str
    value: str
    distribution: str | None
    version: str | None


@dataclass
class Outcome:
    """What the child found for one plugin: a failure at import or registration, or each device's detection."""

    failure: tuple[str, str] | None = None
    """``(stage, error)`` when the plugin cannot be imported or registered; the registry then skips it."""
    detections: dict[str, Detection] = field(default_factory=dict)
    environment: dict[str, str | None] = field(default_factory=dict)
    """Variables the plugin's devices declare (``DeviceSpec.environment``) with their values when vetted."""
    timed_out: bool = False
    """A step hit the deadline: maybe only a busy machine, so the cached outcome expires (:data:`RETRY_AFTER`)."""


def vet(plugins: list[Plugin], deadline: float, steering: Iterable[str] = ()) -> dict[str, Outcome]:
    """Every plugin's :class:`Outcome`, from the cache or from child processes (see the module doc)."""
    if not plugins:
        return {}
    key = cache_key(plugins, deadline, steering)
    cached = _read_cache(key)
    if cached is not None:
        return cached
    outcomes: dict[str, Outcome] = {p.name: Outcome() for p in plugins}
    if not _vet_concurrently(plugins, deadline, outcomes):
        return {}  # no child process can be started (embedded Python, no fork): guard in-process only
    _write_cache(key, outcomes)
    return outcomes


def _vet_concurrently(plugins: list[Plugin], deadline: float, outcomes: dict[str, Outcome]) -> bool:
    """Vet ``plugins`` in up to :data:`MAX_CHILDREN` groups at once, each its own children; False when no child starts.

    Each plugin keeps its own deadline for each step and its own report: a group is what one child
    (and, after a hang or a crash, the next) runs, so ten slow plugins cost about one plugin's time.
    """
    count = min(len(plugins), MAX_CHILDREN)
    groups = [plugins[i::count] for i in range(count)]
    started: list[bool] = []
    errors: list[BaseException] = []

    def run(group: list[Plugin]) -> None:
        try:
            started.append(_vet_group(group, deadline, {p.name: outcomes[p.name] for p in group}))
        except BaseException as exc:  # raised again in the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(group,), name="anydevice-vet", daemon=True) for group in groups[1:]]
    for thread in threads:
        thread.start()
    run(groups[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return all(started)


def _vet_group(plugins: list[Plugin], deadline: float, outcomes: dict[str, Outcome]) -> bool:
    """One group's children, one after the other until every plugin of the group is done; False when none starts."""
    finished: set[str] = set()
    sequential = False
    while True:
        todo = [p for p in plugins if p.name not in finished]
        if not todo:
            return True
        before = _progress(outcomes, finished)
        try:
            ended, sequential = _run_child(todo, deadline, outcomes, finished, sequential)
        except OSError:
            return False
        if ended is not None and _progress(outcomes, finished) == before:  # died between steps, twice the same way
            _charge_all(todo, outcomes, finished, "import", f"the plugin check process {ended} between steps")


# -- the parent side ------------------------------------------------------------------------------
def _progress(outcomes: Mapping[str, Outcome], finished: set[str]) -> int:
    return len(finished) + sum(len(o.detections) for o in outcomes.values())


def _run_child(
    todo: list[Plugin], deadline: float, outcomes: dict[str, Outcome], finished: set[str], sequential: bool
) -> tuple[str | None, bool]:
    """One child over ``todo``, recording what it reports and charging the step it hung or died in.

    Returns how the child ended when it ended between steps (the next child carries on), else
    None; and whether it was killed or died with several detections in flight (the next child then
    runs them one at a time, to find the one that hung or crashed).
    """
    request = {
        "deadline": deadline,
        "path": sys.path,
        "sequential": sequential,
        "plugins": [{"name": p.name, "value": p.value, "skip": sorted(outcomes[p.name].detections)} for p in todo],
    }
    current: dict[str, Any] | None = None
    ready = False
    limit = time.monotonic() + STARTUP_BUDGET
    with Child("anydevice.runtime.vet_child", json.dumps(request), env=_child_environment()) as child:
        while True:
            line = child.next(limit - time.monotonic())
            if line is None:  # the deadline passed with nothing new
                child.close()
                if current is None:
                    stalled = f"stalled between steps ({deadline:g} s)" if ready else f"did not start ({STARTUP_BUDGET:g} s)"
                    _charge_all(todo, outcomes, finished, "import", f"the plugin check {stalled}")
                    return None, False
                return None, _charge(current, outcomes, finished, f"did not finish within {deadline:g} s", deadline)
            kind, text = line
            if kind == "end":
                code = child.wait()
                if current is not None:
                    return None, _charge(current, outcomes, finished, ending(code), deadline)
                if not ready:
                    _charge_all(todo, outcomes, finished, "import", f"the plugin check process {ending(code)} before it started")
                    return None, False
                return ending(code), False  # ended between steps: the next child carries on
            event = _decode(text)
            if event is None:
                continue
            step = event.get("e")
            if step == "start":
                current = event
                grace = GRACE if event.get("stage") == "detect-all" else 0.0  # the child reports its own deadline first
                limit = time.monotonic() + deadline + grace
                continue
            if step == "detected":
                _record_detection(event, outcomes, deadline)
                if current is not None and current.get("stage") == "detect-all":
                    current["devices"] = [d for d in current["devices"] if d != [event["plugin"], event["device"]]]
                    continue  # the others are still running, under the same deadline
            elif step == "ready":
                ready = True
            elif step == "failed":
                name = str(event["plugin"])
                outcomes[name].failure = (str(event["stage"]), str(event["error"]))
                finished.add(name)
            elif step == "registered":
                outcomes[str(event["plugin"])].environment.update(event.get("values") or {})
            elif step == "end":
                finished.add(str(event["plugin"]))
            elif step == "done":
                return None, False
            current = None
            limit = time.monotonic() + deadline


def _child_environment() -> dict[str, str]:
    """The vetting child's environment: this one, unbuffered, without the cuda-compat switch.

    The child is anydevice's own process: the cuda-compat start-up hook (``ANYDEVICE_CUDA_COMPAT``,
    read by the ``.pth`` line at interpreter start) has no script there to serve.
    """
    env = {k: v for k, v in os.environ.items() if k != settings.ANYDEVICE_CUDA_COMPAT.name}
    return {**env, "PYTHONUNBUFFERED": "1"}


def _decode(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _record_detection(event: Mapping[str, Any], outcomes: dict[str, Outcome], deadline: float) -> None:
    from anydevice.runtime.guard import plugin_detection_failure

    plugin, device = str(event["plugin"]), str(event["device"])
    if "detection" in event:
        found = event["detection"]
        detection = Detection(
            available=found["available"],
            reason=found["reason"],
            fix=found["fix"],
            problem=found["problem"],
            count=found["count"],
            chip=found["chip"],
            details=found["details"],
        )
    else:
        kind = str(event["kind"])
        outcomes[plugin].timed_out |= kind == "timeout"
        detection = plugin_detection_failure(plugin, kind, str(event["error"]), deadline)
    outcomes[plugin].detections[device] = detection


def _charge(current: Mapping[str, Any], outcomes: dict[str, Outcome], finished: set[str], error: str, deadline: float) -> bool:
    """The step in progress when the child hung or died is that plugin's failure.

    Returns True when several detections were in flight: nobody is charged, they run again one by one.
    """
    from anydevice.runtime.guard import plugin_detection_failure

    if current.get("stage") == "detect-all":
        in_flight = [(str(p), str(d)) for p, d in current["devices"]]
        if len(in_flight) != 1:
            return bool(in_flight)
        current = {"plugin": in_flight[0][0], "stage": "detect", "device": in_flight[0][1]}
    plugin, stage = str(current["plugin"]), str(current["stage"])
    outcomes[plugin].timed_out |= error.startswith("did not finish")
    if stage == "detect":
        kind = "timeout" if error.startswith("did not finish") else "died"
        outcomes[plugin].detections[str(current["device"])] = plugin_detection_failure(plugin, kind, error, deadline)
    else:
        outcomes[plugin].failure = (stage, error)
        finished.add(plugin)
    return False


def _charge_all(todo: list[Plugin], outcomes: dict[str, Outcome], finished: set[str], stage: str, error: str) -> None:
    """Every plugin of ``todo`` not finished yet fails with ``error``."""
    for plugin in todo:
        if plugin.name not in finished:
            outcomes[plugin.name].failure = (stage, error)
            finished.add(plugin.name)


def cache_key(plugins: list[Plugin], deadline: float, steering: Iterable[str] = ()) -> str:
    """What the outcome depends on, hashed: plugins and versions, Python, torch, deadline, variables, path, boot."""
    from importlib import metadata

    from anydevice.contract import detect

    names = sorted({*KEY_VARIABLES, *steering})
    parts = {
        "v": CACHE_VERSION,
        "anydevice": metadata.version("anydevice"),
        "plugins": sorted((p.name, p.value, p.distribution or "", p.version or "") for p in plugins),
        "python": sys.version,
        "executable": sys.executable,
        "torch": detect.torch_version(),
        "deadline": deadline,
        "env": {k: os.environ.get(k) for k in names},
        "path": sys.path[1:],  # sys.path[0] is the running script's folder, not where plugins come from
        "boot": _boot_id(),
        "uid": os.geteuid(),
        "modules": sorted(_module_stamp(p.value) for p in plugins),  # a plugin edited in place at the same version
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _module_stamp(value: str) -> tuple[str, str, int, int]:
    """The file of an entry point's module (``module:attr``) with its mtime and size, found without importing anything."""
    from importlib.machinery import PathFinder

    module = value.split(":", 1)[0].strip()
    search: list[str] | None = sys.path
    spec = None
    try:
        for depth in range(module.count(".") + 1):
            spec = PathFinder.find_spec(".".join(module.split(".")[: depth + 1]), search)
            if spec is None:
                break
            search = list(spec.submodule_search_locations or [])
        origin = spec.origin if spec is not None else None
        if origin and os.path.isfile(origin):
            st = os.stat(origin)
            return (module, origin, st.st_mtime_ns, st.st_size)
    except (ImportError, OSError, ValueError):
        pass
    return (module, "", 0, 0)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _cache_file(key: str) -> Path | None:
    try:
        return settings.cache_dir("plugins") / f"vet-{key}.json"
    except (OSError, RuntimeError, ValueError):  # no home, unwritable, a bad ANYDEVICE_CACHE_DIR: no cache
        return None


def _read_cache(key: str) -> dict[str, Outcome] | None:
    path = _cache_file(key)
    if path is None:
        return None
    from anydevice.errors import FileAccessError
    from anydevice.files.safe_files import read_bytes

    try:  # a regular file of this user's (or root's) only: a FIFO, a link or another user's entry is no entry
        data = json.loads(read_bytes(path, limit=MAX_CACHE_FILE, follow_links=False, owners={os.geteuid(), 0}))
        expires = data["expires"]
        if expires is not None and time.time() > float(expires):
            return None  # a deadline was hit: try again, the machine may only have been busy
        outcomes = {}
        for name, entry in data["plugins"].items():
            environment = _strings(entry["environment"], none=True)
            if any(os.environ.get(k) != v for k, v in environment.items()):
                return None  # a variable the plugin's devices read changed since
            failure = entry["failure"]
            if failure is not None and not (isinstance(failure, list) and len(failure) == 2):
                raise TypeError("a failure is a [stage, error] pair")
            outcomes[str(name)] = Outcome(
                failure=(str(failure[0]), str(failure[1])) if failure else None,
                detections={str(d): _cached_detection(fields) for d, fields in entry["detections"].items()},
                environment=environment,
            )
        return outcomes
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError, FileAccessError):
        return None  # a bad entry is the cache's fault, not the plugin's: detect again and replace it


def _strings(value: Any, none: bool = False) -> dict[str, Any]:
    """``value`` when it is a dict of strings to strings (or None, with ``none``); else ``TypeError``."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and (isinstance(v, str) or (none and v is None)) for k, v in value.items()
    ):
        raise TypeError("not a mapping of strings")
    return value


def _cached_detection(fields: Any) -> Detection:
    """A :class:`Detection` from a cache entry's fields, each of its declared type; else ``TypeError`` (never the
    plugin's fault: the entry is discarded and the detection run again)."""
    from typing import get_args

    from anydevice.contract.device_spec import Problem

    if not isinstance(fields, dict) or set(fields) != _DETECTION_FIELDS:
        raise TypeError("not a detection")
    count, problem = fields["count"], fields["problem"]
    if not (
        isinstance(fields["available"], bool)
        and isinstance(fields["reason"], str)
        and all(fields[k] is None or isinstance(fields[k], str) for k in ("fix", "chip"))
        and (problem is None or problem in get_args(Problem))
        and (count is None or (isinstance(count, int) and not isinstance(count, bool) and count >= 0))
    ):
        raise TypeError("a detection field has the wrong type")
    return Detection(**{**fields, "details": _strings(fields["details"])})


def _write_cache(key: str, outcomes: Mapping[str, Outcome]) -> None:
    path = _cache_file(key)
    if path is None:
        return
    transient = any(o.timed_out for o in outcomes.values())
    data = {
        "expires": time.time() + RETRY_AFTER if transient else None,
        "plugins": {
            name: {
                "failure": list(o.failure) if o.failure else None,
                "detections": {d: detection_fields(det) for d, det in o.detections.items()},
                "environment": o.environment,
            }
            for name, o in outcomes.items()
        },
    }
    from anydevice.errors import FileAccessError
    from anydevice.files.safe_files import write_bytes

    try:  # the entry is ours to replace whatever is there (a bad entry, a planted link: replaced, never followed)
        write_bytes(path, json.dumps(data).encode(), force=True)
    except FileAccessError:
        pass  # no cache this time (an unwritable directory, another user's entry in a shared one)


def detection_fields(detection: Detection) -> dict[str, Any]:
    return {
        "available": detection.available,
        "reason": detection.reason,
        "fix": detection.fix,
        "problem": detection.problem,
        "count": detection.count,
        "chip": detection.chip,
        "details": dict(detection.details),
    }
