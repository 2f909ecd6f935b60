"""SGLang follows ``ANYDEVICE``: anydevice's platform plugin for SGLang (entry point ``anydevice`` in ``sglang.srt.platforms``).

    anydevice run -- python -m sglang.launch_server --model-path DIR      # sets SGLANG_PLATFORM=anydevice
    SGLANG_PLATFORM=anydevice ANYDEVICE=cpu SGLANG_USE_CPU_ENGINE=1 python -m sglang.launch_server ...

SGLang resolves its platform in each process. With ``SGLANG_PLATFORM=anydevice`` it loads only
this plugin; without it, it asks every installed plugin and refuses when two answer, so while
``ANYDEVICE`` names the device the plugin makes the others inactive for that resolution
(:func:`anydevice.integrations._serving.hide_other_platform_plugins`). :func:`platform_plugin` answers:

- ``ANYDEVICE`` unset: ``None`` (SGLang's own detection decides).
- ``ANYDEVICE`` set: anydevice resolves it and the device becomes SGLang's platform class as
  the device's anydevice plugin declares (``DeviceSpec.serving["sglang"]``): one of SGLang's
  built-in platforms (cpu; cuda, else rocm; xpu; mps), if SGLang's own check finds it, or a
  vendor's ``sglang.srt.platforms`` plugin (called, so its side effects happen).
- Not servable: :class:`SelectionRefused`, an ``SRTPlatform`` whose construction raises
  anydevice's error (SGLang logs and ignores a plugin's exception when it auto-discovers).

SGLang's CPU engine also needs ``SGLANG_USE_CPU_ENGINE=1`` before SGLang is imported
(``sglang.srt.utils.is_cpu`` is read once, at import). ``anydevice run`` sets it; in a process
started another way the plugin sets it while SGLang has not read it yet, and otherwise refuses
with the fix.

Importing this module imports neither torch nor SGLang.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.errors import AnyDeviceError
from anydevice.integrations import _serving
from anydevice.integrations._serving import SGLANG, Decision

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend

log = logging.getLogger("sglang.anydevice")

PLUGIN = SGLANG.plugin_name
_PLATFORMS = "sglang.srt.platforms"

_decisions: dict[str, Decision] = {}


def platform_plugin() -> str | None:
    """SGLang's entry point: the platform class for ``ANYDEVICE``, or None when it is unset (SGLang decides alone)."""
    selection = _serving.requested()
    if selection is None:
        return None
    hidden = _serving.hide_other_platform_plugins("sglang.srt.platforms", "_resolve_platform", "all_plugins", "activated", PLUGIN)
    first = selection not in _decisions
    decision = platform_for(selection)
    if first:
        _serving.announce(SGLANG, selection, decision, hidden, log)
    return decision.platform if decision.error is None else f"{__name__}.SelectionRefused"


def platform_for(selection: str) -> Decision:
    """What SGLang's platform becomes under ``selection`` (decided once per process and selection)."""
    if selection not in _decisions:
        _decisions[selection] = decide(selection)
    return _decisions[selection]


def decide(selection: str) -> Decision:
    """Resolve ``selection`` with anydevice and find SGLang's platform class for the device."""
    return _serving.decide(SGLANG, selection, builtin_platform)


def builtin_platform(name: str) -> _serving.Found | None:
    """SGLang's built-in platform ``name`` (module ``sglang.srt.platforms.<name>``) if SGLang's own check finds it."""
    import importlib
    import importlib.util

    platforms = sys.modules.get(_PLATFORMS) or importlib.import_module(_PLATFORMS)
    available = getattr(platforms, f"_is_{name}_available", None)
    module = f"{_PLATFORMS}.{name}"
    if available is None or importlib.util.find_spec(module) is None:
        return None
    if name == "cpu":
        _cpu_engine()  # SGLang's CPU check reads SGLANG_USE_CPU_ENGINE
    if not available():
        return None, f"SGLang's '{name}' platform finds no device"
    cls = _platform_class(module)
    return f"{cls.__module__}.{cls.__qualname__}", f"SGLang's built-in '{name}' platform"


def _platform_class(module: str) -> type:
    """The ``SRTPlatform`` subclass a module of ``sglang.srt.platforms`` defines."""
    import importlib

    from sglang.srt.platforms.interface import SRTPlatform

    found = importlib.import_module(module)
    classes = [v for v in vars(found).values() if isinstance(v, type) and issubclass(v, SRTPlatform) and v.__module__ == module]
    return classes[0]


def _cpu_engine() -> None:
    """Turn on SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``) if SGLang has not read it yet; else anydevice's error."""
    name = settings.SGLANG_USE_CPU_ENGINE.name
    value = os.environ.get(name)
    if value == "1":
        return
    fix = f"start with `anydevice run -- ...` (it sets {name}=1), or export {name}=1 before starting SGLang"
    if value is not None:
        raise AnyDeviceError(f"ANYDEVICE selects cpu but {name}={value}: SGLang's CPU engine stays off.", fix)
    common = sys.modules.get("sglang.srt.utils.common")  # may be half imported: SGLang resolves its platform from it
    is_cpu = getattr(common, "is_cpu", None)
    if is_cpu is not None and is_cpu.cache_info().currsize:  # read already, as off: setting it now changes nothing
        raise AnyDeviceError(f"ANYDEVICE selects cpu but SGLang was imported without {name}=1.", fix)
    os.environ[name] = "1"
    log.info("anydevice: ANYDEVICE selects cpu: set %s=1 for SGLang's CPU engine", name)


def _refused_class() -> type:
    """An ``SRTPlatform`` whose construction raises anydevice's error (SGLang accepts only its subclasses)."""
    from sglang.srt.platforms.interface import SRTPlatform

    class SelectionRefused(SRTPlatform):  # type: ignore[misc]  # SGLang's platform class is untyped
        """The platform SGLang gets when the selection cannot be served: constructing it raises anydevice's error."""

        def __init__(self) -> None:
            selection = _serving.requested() or "auto"
            error = platform_for(selection).error
            raise error or AnyDeviceError(f"ANYDEVICE={selection} cannot be served by SGLang here.", "Run `anydevice doctor`.")

    SelectionRefused.__module__ = __name__
    return SelectionRefused


def __getattr__(name: str) -> Any:
    """``SelectionRefused`` is built on first use, so that importing this module does not import SGLang."""
    if name == "SelectionRefused":
        cls = _refused_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def launch_env(backend: Backend) -> dict[str, str]:
    """For ``anydevice run``: ``SGLANG_PLATFORM=anydevice`` (and the CPU engine switch on cpu) when SGLang is installed.

    A value the user set is kept.
    """
    if _serving.installed_distribution(SGLANG) is None:
        return {}
    env = {settings.SGLANG_PLATFORM.name: PLUGIN}
    if backend.name == "cpu":
        env[settings.SGLANG_USE_CPU_ENGINE.name] = "1"
    return {k: v for k, v in env.items() if k not in os.environ}
