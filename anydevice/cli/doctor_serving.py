"""``anydevice doctor``'s serving section: vLLM and SGLang, read from package metadata (neither engine is imported).

For each installed engine: the torch it was built for against the installed torch, the platform it
will use under the current selection (through anydevice's platform plugin), and conflicts: several
vendor platform plugins, and engine settings that bypass or override ``ANYDEVICE``.
"""

from __future__ import annotations

import os
from importlib import metadata

from anydevice import settings
from anydevice.contract import detect, versions
from anydevice.contract.device_spec import Devices, Serving
from anydevice.contract.diagnosis import Check, DoctorContext
from anydevice.errors import AnyDeviceError
from anydevice.integrations import _serving
from anydevice.integrations._serving import VLLM, Engine


def check_serving(ctx: DoctorContext) -> list[Check]:
    """Every installed serving engine; one info line when none is."""
    checks: list[Check] = []
    for engine in _serving.ENGINES:
        found = _serving.installed_distribution(engine)
        if found is not None:
            checks.extend(_engine_checks(ctx, engine, *found))
    if not checks:
        return [Check("serving", "info", "no serving engine installed (vLLM, SGLang)")]
    return checks


def _engine_checks(ctx: DoctorContext, engine: Engine, dist: str, version: str) -> list[Check]:
    label = engine.name
    checks = [Check(label, "ok", f"{dist} {version} installed")]
    torch_check = torch_pin(label, dist, version)
    if torch_check is not None:
        checks.append(torch_check)
    plugins = _serving.platform_entry_points(engine)
    if engine.plugin_name not in plugins:
        checks.append(
            Check(
                f"{label} platform",
                "fail",
                f"anydevice's {engine.platform_group} entry point is not installed: {engine.name} ignores ANYDEVICE",
                "reinstall anydevice (pip install --force-reinstall --no-deps anydevice)",
            )
        )
    else:
        checks.append(platform_under_selection(ctx, engine, dist))
    checks.extend(vendor_conflicts(engine, [name for name in plugins if name != engine.plugin_name]))
    checks.extend(bypassing_settings(ctx, engine))
    return checks


def torch_pin(label: str, dist: str, version: str) -> Check | None:
    """The engine's own pin on torch against the installed torch (an engine built for another torch breaks at import)."""
    installed = detect.torch_version()
    spec = torch_requirement(dist)
    if installed is None or spec is None:
        return None
    if satisfies(installed, spec):
        return Check(f"{label} torch", "ok", f"{dist} {version} accepts torch {installed} (torch{spec})")
    return Check(
        f"{label} torch",
        "fail",
        f"{dist} {version} is built for torch{spec} but torch {installed} is installed: it fails at import or in its kernels",
        f'pip install "torch{spec}" (or the {dist} release built for torch {installed})',
    )


def torch_requirement(dist: str) -> str | None:
    """The specifier ``dist`` puts on torch for this machine (environment markers evaluated when ``packaging`` is there)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return versions.torch_requirement(dist)
    try:
        lines = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})):
            return str(req.specifier) or None
    return None


def satisfies(version: str, spec: str) -> bool:
    """``version`` meets ``spec``, local labels included (``2.13.0+cpu`` is not ``2.13.0`` of the CUDA build)."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version
    except ImportError:
        return versions._satisfies(version, spec)
    return SpecifierSet(spec).contains(Version(version), prereleases=True)


def platform_under_selection(ctx: DoctorContext, engine: Engine, dist: str) -> Check:
    """Which platform the engine will take under the current selection, as the device's plugin declares it."""
    label = f"{engine.name} platform"
    requested = _serving.requested()
    if requested is None:
        return Check(label, "ok", f"ANYDEVICE is unset: {engine.name} detects its platform itself (anydevice stays out)")
    device, served_by = ctx.selected, ""
    if device is None:
        try:  # the engine's own stack may drive what anydevice's detection finds unavailable (libtpu alone)
            device, why = _serving.resolve_device(requested, engine)
            served_by = f" ({why.partition(': ')[2]})"
        except AnyDeviceError:
            return Check(
                label,
                "info",
                f"ANYDEVICE={requested} does not resolve here (see selection): {engine.name} will stop with that error",
            )
    prefix = f"ANYDEVICE={requested} -> {device}{served_by}{_visible(engine, requested, device)}"
    declared = _serving.declared_serving(engine, device, ctx.registry)
    if not declared.platforms and not declared.plugins:
        return Check(
            label, "warn", f"{prefix}: {declared.hint or f'{engine.name} cannot serve {device}'}", "choose another device"
        )
    plugin = _installed_plugin(engine, declared)
    if plugin is not None and (declared.plugins_first or not declared.platforms):
        return Check(label, "ok", f"{prefix}: the platform plugin {plugin}")
    if declared.platforms:
        built_for = [name for name in ctx.registry.names() if dist in _builds(ctx.registry, name, engine)]
        if built_for and device not in built_for:
            return Check(
                label, "warn", f"{prefix}, but {dist} is {engine.name}'s build for {', '.join(built_for)}", declared.hint
            )
        return Check(label, "ok", f"{prefix}: {engine.name}'s built-in {' or '.join(declared.platforms)} platform")
    looked = ", ".join(declared.plugins)
    return Check(
        label, "warn", f"{prefix}: no {engine.name} platform plugin for it is installed (looked for {looked})", declared.hint
    )


def _installed_plugin(engine: Engine, declared: Serving) -> str | None:
    """The first declared vendor platform plugin that is installed, as ``'name' (distribution version)``."""
    plugins = _serving.platform_entry_points(engine)
    for name in declared.plugins:
        if name in plugins and name != engine.plugin_name:
            return f"'{name}' ({_serving.distribution_of(plugins[name])})"
    return None


def _visible(engine: Engine, requested: str, device: str) -> str:
    """``; CUDA_VISIBLE_DEVICES=1 for the engine`` where an index becomes its visible-device setting."""
    try:
        env = _serving.visible_env(engine, requested, device)
    except AnyDeviceError as exc:
        return f"; {exc.message}"
    return "".join(f"; {k}={v} for the engine" for k, v in env.items() if k != settings.ANYDEVICE.name)


def _builds(registry: Devices, device: str, engine: Engine) -> tuple[str, ...]:
    declared: Serving | None = getattr(registry.spec(device), "serving", {}).get(engine.name)
    return declared.builds if declared is not None else ()


def vendor_conflicts(engine: Engine, vendors: list[str]) -> list[Check]:
    """Several vendor platform plugins: the engine refuses to start when two detect a device, unless ANYDEVICE decides."""
    if len(vendors) < 2:
        return []
    names = ", ".join(vendors)
    if _serving.requested() is not None:
        return [
            Check(
                f"{engine.name} plugins",
                "ok",
                f"vendor platform plugins {names}: ANYDEVICE decides, the others are not consulted",
            )
        ]
    return [
        Check(
            f"{engine.name} plugins",
            "warn",
            f"{len(vendors)} vendor platform plugins installed ({names}): {engine.name} refuses to start when two "
            "detect a device",
            "set ANYDEVICE to the device to serve on (anydevice then consults only that device's plugin), "
            "or uninstall the ones you do not use",
        )
    ]


def bypassing_settings(ctx: DoctorContext, engine: Engine) -> list[Check]:
    """Engine settings that make it ignore ``ANYDEVICE``."""
    requested = _serving.requested()
    if requested is None:
        return []
    if engine is VLLM:
        target = os.environ.get(settings.VLLM_TARGET_DEVICE.name, "").strip().lower()
        if target == "cpu" and ctx.selected not in (None, "cpu"):
            name = settings.VLLM_TARGET_DEVICE.name
            return [
                Check(
                    name,
                    "warn",
                    f"{name}=cpu makes vLLM take its CPU platform without asking platform plugins: "
                    f"ANYDEVICE={requested} is ignored",
                    f"unset {name}",
                )
            ]
        return []
    chosen = os.environ.get(settings.SGLANG_PLATFORM.name, "").strip()
    if chosen and chosen != engine.plugin_name:
        name = settings.SGLANG_PLATFORM.name
        return [
            Check(
                name,
                "warn",
                f"{name}={chosen}: SGLang loads only that platform plugin, so ANYDEVICE={requested} is ignored",
                f"set {name}={engine.plugin_name}, or unset it",
            )
        ]
    return []
