"""The probe catalogue: the built-in probes plus those plugins register, and ``--only`` selection."""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Iterable

from anydevice.compat_matrix.probe import TARGET_GROUPS, Probe, target_family, target_group

SANITY_NAME = "sanity"
_GLOB = set("*?[")


def builtin_probes() -> list[Probe]:
    """Every built-in probe, sanity first, then the cheap groups before the slow ones."""
    from anydevice.compat_matrix import (
        probes_collectives,
        probes_compilation,
        probes_compile,
        probes_dtypes,
        probes_export,
        probes_ops,
        probes_parallel,
        probes_placement,
        probes_profiling,
        probes_workloads,
    )

    return [
        probes_placement.SANITY,
        *probes_placement.PROBES,
        *probes_dtypes.PROBES,
        *probes_ops.PROBES,
        *probes_profiling.PROBES,
        *probes_compilation.PROBES,
        *probes_collectives.PROBES,
        *probes_workloads.PROBES,
        *probes_export.PROBES,
        *probes_compile.PROBES,
        *probes_parallel.PROBES,
    ]


def plugin_probes(problems: list[str]) -> list[Probe]:
    """Probes plugins add through the ``anydevice_register_probes`` hook; failures go to ``problems``."""
    try:
        from anydevice.runtime.registry import get_registry

        registry = get_registry()
    except Exception as exc:  # the matrix must still run when the registry cannot load
        problems.append(f"plugin probes not loaded: {type(exc).__name__}: {exc}")
        return []
    found: list[Probe] = []

    def register(probe: object) -> None:
        if isinstance(probe, Probe):
            found.append(probe)
        else:
            problems.append(f"a plugin registered {probe!r}, not an anydevice.compat_matrix.probe.Probe")

    before = len(registry.failures)
    registry.call_hook("anydevice_register_probes", register)
    problems.extend(
        f"plugin {f.plugin}: its {f.stage.removeprefix('hook ')} hook {f.error}; its probes (if any) were not added"
        for f in registry.failures[before:]
    )
    return found


def module_probes(modules: Iterable[str], problems: list[str]) -> list[Probe]:
    """Probes from importable modules' ``PROBES`` lists (``--module``: probes under development, tests)."""
    found: list[Probe] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            problems.append(f"probe module {name}: {type(exc).__name__}: {exc}")
            continue
        listed = getattr(module, "PROBES", None)
        if not isinstance(listed, list) or not all(isinstance(p, Probe) for p in listed):
            problems.append(f"probe module {name} has no PROBES list of Probe objects")
            continue
        found += listed
    return found


def all_probes(problems: list[str] | None = None, with_plugins: bool = True, modules: Iterable[str] = ()) -> list[Probe]:
    """Built-in, plugin and module probes; a probe whose name is taken is dropped (and reported)."""
    problems = problems if problems is not None else []
    probes: dict[str, Probe] = {}
    extra = [*(plugin_probes(problems) if with_plugins else []), *module_probes(modules, problems)]
    for probe in [*builtin_probes(), *extra]:
        if probe.name in probes:
            problems.append(f"probe name {probe.name!r} registered twice; the second was ignored")
            continue
        probes[probe.name] = probe
    return list(probes.values())


def matches(name: str, group: str, only: str) -> bool:
    """Whether a probe is picked by ``--only``: comma-separated globs or substrings of name, or its group."""
    for pattern in (p.strip() for p in only.split(",")):
        if not pattern:
            continue
        if _GLOB & set(pattern):
            if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(group, pattern):
                return True
        elif pattern in name or pattern == group:
            return True
    return False


def for_target(probe: Probe, target: str | None) -> bool:
    """Whether ``probe`` belongs to a run for ``target``: device runs (None) take every probe but the export and
    compile groups'; a target's run takes the sanity gate and its own group's probes for that target."""
    if probe.name == SANITY_NAME:
        return True
    if target is None:
        return probe.group not in TARGET_GROUPS
    return probe.group == target_group(target) and probe.params.get("target") == target_family(target)


def select(probes: Iterable[Probe], only: str | None, target: str | None = None) -> list[Probe]:
    """The probes to run for ``target`` (None: the device): those ``only`` picks (all when None), sanity first."""
    chosen = [
        p for p in probes if for_target(p, target) and (only is None or p.name == SANITY_NAME or matches(p.name, p.group, only))
    ]
    chosen.sort(key=lambda p: p.name != SANITY_NAME)  # stable: keeps the catalogue order otherwise
    return chosen
