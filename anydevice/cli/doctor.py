"""``anydevice doctor``: check the environment, one line per check, a fix for each problem.

    anydevice doctor [--json] [--strict] [--measure-imports]

Checks: torch, whether its minor version is in anydevice's range and which devices were tested here
on it (test lanes' records, result files) or only declared, each vendor package's version pairing
(read from metadata, before anything is imported; the packages and rules are the plugins'
``DeviceSpec.paired_packages``), installed plugins and their detection, what ``ANYDEVICE``
selects, the SLURM view of the job (an srun task's rank, world and rendezvous), conflicting
settings (the plugins judge their own variables through the
``anydevice_doctor_checks`` hook; core judges ``TORCH_DEVICE_BACKEND_AUTOLOAD``), the import cost
of autoloaded backends nobody selected, a C++ compiler for inductor, free disk for the compile
caches, and the serving engines (:mod:`anydevice.cli.doctor_serving`). Neither torch nor a vendor
library is imported (``--measure-imports`` times ``import torch`` in child processes).

Every diagnosis is one line: ``MARK  name  message  -> fix: what to do``.

Exit status: 0 when healthy (warnings allowed unless ``--strict``), 1 when a check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from anydevice import settings
from anydevice.cli.doctor_serving import check_serving
from anydevice.cli.progress import Progress
from anydevice.contract import detect, versions
from anydevice.contract.diagnosis import Check, DoctorContext, Status
from anydevice.distributed import slurm as slurm_env
from anydevice.errors import AnyDeviceError, DeviceUnavailableError
from anydevice.runtime import autoload, guard
from anydevice.runtime.registry import Registry, get_registry
from anydevice.runtime.selection import parse, resolve
from anydevice.runtime.untrusted import clean

__all__ = ["Check", "Context", "DoctorContext", "Status", "main", "render", "run_checks"]

Context = DoctorContext  # the name the checks below use


def _registry(ctx: Context) -> Registry:
    """Core's checks run with the full registry (failures, guarded calls); plugins get only its read-only view."""
    return cast("Registry", ctx.registry)


MARK: dict[Status, str] = {"ok": "ok  ", "info": "--  ", "warn": "WARN", "fail": "FAIL"}
MIN_FREE_GIB, LOW_FREE_GIB = 1.0, 5.0
LINE_LIMIT = 2000
"""Characters of one check's message (plugin text inside it is capped at 500 where it enters)."""


# -- versions -------------------------------------------------------------------------------
def check_torch(ctx: Context) -> list[Check]:
    build = detect.torch_build()
    if not build:
        return [Check("torch", "fail", "torch is not installed", "pip install torch")]
    kind = next((f"{k.upper()} {v}" for k, v in detect.accelerator_builds(build).items()), "CPU")
    return [Check("torch", "ok", f"torch {build.get('version')} ({kind} build)")]


def check_torch_support(ctx: Context) -> list[Check]:
    """Is torch within anydevice's range (``anydevice.contract.versions.TORCH_MINORS``)?

    Which devices ran on it is the matrix's page.
    """
    installed = detect.torch_version()
    if installed is None:
        return []
    low, high = versions.TORCH_MINORS[0], versions.TORCH_MINORS[-1]
    minor = ".".join(map(str, detect.major_minor(installed)))
    if minor not in versions.TORCH_MINORS:
        fix = f"install a torch from {low} to {high}, e.g. pip install torch=={high}.*"
        return [Check("torch support", "warn", f"torch {minor} is outside anydevice's range ({low} to {high})", fix)]
    where = "which devices ran on it: the versions table of docs/compat (anydevice matrix render)"
    return [Check("torch support", "ok", f"torch {minor} is in anydevice's range ({low} to {high}); {where}")]


def paired_packages(registry: Registry) -> dict[str, versions.PairRule | Callable[[str], versions.PairRule]]:
    """Every vendor distribution a device declares must pair with torch, with its rule (first declaration wins)."""
    pairs: dict[str, versions.PairRule | Callable[[str], versions.PairRule]] = {}
    for name in registry.names():
        for package, rule in registry.get(name).spec.paired_packages.items():
            pairs.setdefault(package, rule)
    return pairs


def _owners(registry: Registry) -> dict[str, str]:
    """Vendor distribution -> the plugin that declared its pairing rule first."""
    owners: dict[str, str] = {}
    for name in registry.names():
        entry = registry.get(name)
        for package in entry.spec.paired_packages:
            owners.setdefault(package, entry.plugin)
    return owners


def _pair(
    package: str, rule: versions.PairRule | Callable[[str], versions.PairRule], registry: Registry, plugin: str
) -> versions.PairCheck | Check | None:
    if isinstance(rule, str):
        return versions.check_pair(package, rule)
    installed = detect.version_of(package)
    if installed is None:
        return None
    try:  # a rule that is a function is plugin code: guarded like every call into a plugin
        decided = registry.call(plugin, "paired_packages", functools.partial(rule, installed))
    except guard.PluginCallError as exc:
        return Check(
            package, "fail", f"plugin '{exc.plugin}' failed to give the pairing rule: {exc.error}", guard.plugin_fix(plugin)
        )
    if decided not in ("lockstep", "requires_dist"):
        error = f"plugin '{plugin}' gave the pairing rule {clean(repr(decided), 80)}, not 'lockstep' or 'requires_dist'"
        return Check(package, "fail", error, guard.plugin_fix(plugin))
    return versions.check_pair(package, decided)


def check_pairs(ctx: Context) -> list[Check]:
    declared = paired_packages(_registry(ctx))
    owners = _owners(_registry(ctx))
    checks: list[Check] = []
    for package, rule in declared.items():
        pair = _pair(package, rule, _registry(ctx), owners.get(package, "?"))
        if isinstance(pair, Check):
            checks.append(pair)
        elif pair is not None:
            checks.append(Check(package, "ok" if pair.ok else "fail", pair.reason, None if pair.ok else pair.fix))
    if checks or not declared:
        return checks
    return [Check("vendor packages", "info", f"none of {', '.join(declared)} is installed")]


# -- plugins and selection ------------------------------------------------------------------
def check_plugins(ctx: Context) -> list[Check]:
    registry = _registry(ctx)
    checks = [
        Check(
            f"plugin {failure.plugin}",
            "fail",
            f"failed at {failure.stage}: {failure.error}",
            f"fix or uninstall the package that provides plugin '{failure.plugin}', "
            f"or load only the plugins you need with ANYDEVICE_PLUGINS=name,name",
        )
        for failure in registry.failures
    ]
    for name in registry.names():
        entry, found = registry.get(name), registry.detect(name)
        label = f"device {name}"
        source = f" [plugin {entry.plugin}" + (f" from {entry.distribution}" if entry.distribution else "") + "]"
        if found.available:
            chip = f", chip {found.chip}" if found.chip else ""
            checks.append(Check(label, "ok", f"available: {found.reason}{chip}{source}"))
        else:  # absent hardware or package is normal; a mismatch of a paired package is reported above
            problem = found.problem in ("plugin_error", "hardware_without_package") or (
                found.problem == "version_mismatch" and entry.spec.vendor_package not in entry.spec.paired_packages
            )
            checks.append(Check(label, "fail" if problem else "info", f"not available: {found.reason}{source}", found.fix))
    return checks


def check_selection(ctx: Context) -> list[Check]:
    try:
        choice = resolve(ctx.requested, _registry(ctx))
    except DeviceUnavailableError as exc:
        available = f" Available here: {', '.join(exc.available) or 'none'}."
        return [Check("selection", "fail", f"ANYDEVICE={ctx.requested}: {exc.message}{available}", exc.fix)]
    except AnyDeviceError as exc:
        return [Check("selection", "fail", f"ANYDEVICE={ctx.requested}: {exc.message}", exc.hint)]
    ctx.selected = choice.name
    how = "the available device with the highest priority" if ctx.requested == "auto" else choice.why.split(" (", 1)[0]
    return [Check("selection", "ok", f"ANYDEVICE={ctx.requested} selects {choice.name} ({how})")]


def check_roles(ctx: Context) -> list[Check]:
    """The device of each role in ``ANYDEVICE_ROLES``, their pairings on one host, and each weight sync."""
    from anydevice.runtime import roles

    name = settings.ANYDEVICE_ROLES.name
    try:
        declared = roles.declared()
        if not declared:
            return [Check("roles", "info", f"none declared ({name} unset): every role follows ANYDEVICE")]
        plan = roles.plan(registry=_registry(ctx), weights_from=next(iter(declared)))
    except AnyDeviceError as exc:
        return [Check("roles", "fail", f"{name}: {exc.message}", exc.hint)]
    placed = ", ".join(f"{r}={p.device}" for r, p in plan.placements.items())
    syncs = "; ".join(f"{s.source}->{s.target}: {s.transport}" for s in plan.syncs)
    return [Check("roles", "ok", f"{placed} (checked as separate processes on one host; weight sync {syncs})")]


def check_slurm(ctx: Context) -> list[Check]:
    """The SLURM view of the job (no line outside SLURM): this task's place, or why it is not one."""
    job = settings.SLURM_JOB_ID.get()
    if job is None and settings.SLURM_PROCID.get() is None:
        return []
    try:
        task = slurm_env.srun_task()
    except AnyDeviceError as exc:
        return [Check("slurm", "fail", exc.message, exc.hint)]
    if task is not None:
        where = f"{len(task.nodes)} node(s) from SLURM_NODELIST={settings.SLURM_NODELIST.get()}"
        return [
            Check(
                "slurm",
                "ok",
                f"srun task: rank {task.rank} of {task.world_size}, local rank {task.local_rank}; job {task.job_id}, "
                f"{where}; rendezvous {task.master_addr}:{task.master_port}",
            )
        ]
    if settings.SLURM_PROCID.get() is not None and not slurm_env.in_batch_step():
        return [Check("slurm", "info", f"SLURM job {job}: a launcher's RANK/WORLD_SIZE/LOCAL_RANK are set and win over SLURM's")]
    step = " (the batch script: no SLURM_STEP_ID)" if slurm_env.in_batch_step() else ""
    return [
        Check(
            "slurm",
            "info",
            f"inside SLURM job {job} but not an srun task{step}: one process here is a world of one",
            "start the ranks with `srun python train.py` or `srun anydevice run train.py` (one world over the tasks)",
        )
    ]


# -- settings -------------------------------------------------------------------------------
def check_plugin_settings(ctx: Context) -> list[Check]:
    """Every plugin's own checks (``anydevice_doctor_checks``), guarded; a plugin whose hook fails is named.

    A third-party plugin's hook runs under the deadline; what it returns must be a list of
    :class:`Check`, and its text is cleaned (:func:`anydevice.runtime.untrusted.clean`) before it is shown.
    """
    checks: list[Check] = []
    registry = _registry(ctx)
    hook = registry.pm.hook.anydevice_doctor_checks
    view = dataclasses.replace(ctx, registry=registry.view())  # plugins read the devices, never change them
    for impl in hook.get_hookimpls():
        plugin = impl.plugin_name
        try:
            result = registry.call(plugin, "doctor checks", functools.partial(impl.function, context=view))
            found = _plugin_checks(result)
        except (guard.PluginCallError, TypeError) as exc:
            error = exc.error if isinstance(exc, guard.PluginCallError) else str(exc)
            checks.append(
                Check(
                    f"plugin {plugin}",
                    "fail",
                    f"failed at doctor checks: {error}",
                    f"fix or uninstall the package that provides plugin '{plugin}'",
                )
            )
            continue
        checks.extend(c for c in found if c not in checks)
    return checks


def _plugin_checks(result: object) -> list[Check]:
    """A hook's return value as cleaned checks; a :class:`TypeError` saying what is wrong otherwise."""
    if result is None:
        return []
    if not isinstance(result, (list, tuple)):
        raise TypeError(f"returned {type(result).__name__}, not a list of Check")
    checks = []
    for item in result:
        valid = isinstance(item, Check) and isinstance(item.name, str) and isinstance(item.message, str)
        if not valid or item.status not in MARK or not isinstance(item.fix, (str, type(None))):
            raise TypeError(
                f"returned {clean(repr(item), 120)}, not a Check with a name, a status of {', '.join(MARK)} and a message"
            )
        checks.append(Check(clean(item.name, 120), item.status, clean(item.message), clean(item.fix)))
    return checks


def judged_settings(registry: Registry) -> list[str]:
    """The variables doctor judges: ``TORCH_DEVICE_BACKEND_AUTOLOAD`` and every device's ``environment``."""
    names = [v for name in registry.names() for v in registry.get(name).spec.environment]
    return list(dict.fromkeys([*names, settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name]))


def user_autoload_value() -> str | None:
    """``TORCH_DEVICE_BACKEND_AUTOLOAD`` as the user set it (not as the anydevice CLI set it for itself)."""
    if autoload.applied_here():
        return autoload.replaced_value()
    return os.environ.get(settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name)


def check_autoload_setting(ctx: Context) -> list[Check]:
    value = user_autoload_value()
    name = settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name
    if value is None:
        return []
    if value not in ("0", "1"):
        fix = f"set {name}=0 (off) or {name}=1 (on)"
        return [Check(name, "warn", f"{name}={value!r}: torch treats every value but '1' as off", fix)]
    modules = sorted({m for n in ctx.registry.names() if (m := ctx.registry.spec(n).autoload_module)})
    backends = f"autoloaded backends ({', '.join(modules)})" if modules else "autoloaded backends"
    state = "on" if value == "1" else f"off: {backends} load only when anydevice selects them"
    return [Check(name, "ok", f"{name}={value}: {state}")]


def check_autoload_cost(ctx: Context, measure: bool = False) -> list[Check]:
    checks = []
    value = user_autoload_value()
    autoload_on = value is None or value == "1"
    for name in ctx.registry.names():
        module = ctx.registry.spec(name).autoload_module
        if module is None or not detect.installed(module):
            continue
        label = f"import cost {module}"
        if not autoload_on:
            checks.append(Check(label, "ok", f"{module} is installed; autoload is off, so `import torch` does not import it"))
        elif ctx.selected == name or name in ctx.requested_names:
            checks.append(Check(label, "ok", f"{module} is autoloaded by `import torch` and {name} is selected"))
        else:
            cost = measure_import_cost() if measure else "typically +2-3 s, and it loads its runtime"
            checks.append(
                Check(
                    label,
                    "warn",
                    f"{module} is installed and torch's backend autoload is on: every `import torch` imports it "
                    f"({cost}) although {ctx.selected or ctx.requested} is selected",
                    f"export {settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name}=0 (anydevice still loads {module} when {name} is "
                    f"selected; `anydevice run` and the CLI already do this)",
                )
            )
    return checks


def measure_import_cost(python: str = sys.executable, repeats: int = 2) -> str:
    """``import torch`` timed in child processes with autoload on and off (best of ``repeats``)."""
    timings: dict[str, float] = {}
    with Progress(2 * repeats, "measuring `import torch`") as progress:
        for state in ("1", "0"):
            env = {**os.environ, settings.TORCH_DEVICE_BACKEND_AUTOLOAD.name: state}
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                subprocess.run([python, "-c", "import torch"], env=env, capture_output=True, timeout=300, check=False)
                best = min(best, time.perf_counter() - start)
                progress.advance(f"autoload={state}")
            timings[state] = best
        progress.close("")
    return f"`import torch` took {timings['1']:.1f} s with autoload, {timings['0']:.1f} s without"


# -- toolchain and disk ---------------------------------------------------------------------
def default_cxx() -> str:
    """The compiler inductor uses: ``CXX``, else ``g++`` (``clang++`` on macOS, ``cl`` on Windows)."""
    return settings.CXX.get() or {"darwin": "clang++", "win32": "cl"}.get(sys.platform, "g++")


def check_compiler(ctx: Context) -> list[Check]:
    cxx = default_cxx()
    fix = "install a C++ compiler (Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install) or point CXX at one"
    path = shutil.which(cxx)
    if path is None:
        return [Check("C++ compiler", "fail", f"no C++ compiler '{cxx}' on PATH: torch.compile's inductor needs one", fix)]
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check("C++ compiler", "fail", f"{path} does not run: {exc}", fix)]
    if done.returncode != 0:
        return [Check("C++ compiler", "fail", f"{path} --version failed: {(done.stderr or done.stdout).strip()[:120]}", fix)]
    first = (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else path
    return [Check("C++ compiler", "ok", f"{cxx} for inductor: {first}")]


def check_cache_disk(ctx: Context) -> list[Check]:
    fix_dir = f"point {settings.ANYDEVICE_CACHE_DIR.name} at a writable directory on a disk with room"
    try:
        directory = settings.cache_dir()
        fd, probe = tempfile.mkstemp(prefix=".doctor-", dir=directory)  # a new file, a random name: no planted link followed
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return [Check("compile cache", "fail", f"the compile cache directory is not writable: {exc}", fix_dir)]
    except RuntimeError as exc:  # Path.home() with no HOME and no passwd entry (a container's uid)
        return [
            Check(
                "compile cache",
                "warn",
                f"no home directory to keep the compile caches in ({exc}): compiles cache in a temporary directory",
                f"set HOME, or point {settings.ANYDEVICE_CACHE_DIR.name} at a writable directory",
            )
        ]
    return [disk_check(directory, shutil.disk_usage(directory).free)]


def disk_check(directory: Path, free_bytes: int) -> Check:
    """Free space under the compile cache: below 1 GiB fails, below 5 GiB warns."""
    gib = free_bytes / 2**30
    where = f"{gib:.1f} GiB free for compile caches in {directory}"
    fix = f"free disk space there, or point {settings.ANYDEVICE_CACHE_DIR.name} at a disk with more room"
    if gib < MIN_FREE_GIB:
        return Check("compile cache", "fail", f"only {where}", fix)
    if gib < LOW_FREE_GIB:
        return Check("compile cache", "warn", f"only {where}: large compiled graphs may not fit", fix)
    return Check("compile cache", "ok", where)


def check_strict(ctx: Context) -> list[Check]:
    """Whether strict mode (CPU fallback is an error) is on, and how the selected device's plugin notices fallback."""
    name = settings.ANYDEVICE_STRICT.name
    try:
        on = settings.ANYDEVICE_STRICT.flag()
    except AnyDeviceError as exc:
        return [Check("strict mode", "fail", exc.message, exc.hint)]
    if not on:
        return [Check("strict mode", "info", f"off: ops that fall back to the CPU run there ({name}=1 makes them errors)")]
    device = ctx.requested_names[0] if ctx.requested_names else None
    facts = ctx.registry.spec(device).check if device and ctx.registry.canonical(device) else None
    if facts is not None and facts.fallback == "unknown":
        fix = f"unset {name}, or select a device whose plugin declares CheckFacts.fallback"
        return [Check("strict mode", "fail", f"on, but the {device} plugin declares no way to notice CPU fallback", fix)]
    how = f" ({device}: {facts.fallback})" if facts is not None else ""
    return [Check("strict mode", "ok", f"on: an op that runs on the CPU instead of the device is an error{how}")]


# -- running --------------------------------------------------------------------------------
CHECKS: tuple[Callable[[Context], list[Check]], ...] = (
    check_torch,
    check_torch_support,
    check_pairs,
    check_plugins,
    check_selection,
    check_roles,
    check_slurm,
    check_plugin_settings,
    check_autoload_setting,
    check_serving,
    check_compiler,
    check_cache_disk,
    check_strict,
)


def run_checks(measure_imports: bool = False, registry: Registry | None = None) -> list[Check]:
    """Every check, in report order."""
    requested = settings.ANYDEVICE.get() or "auto"
    registry = registry or get_registry()
    try:
        names = [registry.canonical(item.name) or item.name for item in parse(requested).items]
    except AnyDeviceError:
        names = []
    ctx = Context(registry, requested, names)
    checks: list[Check] = []
    for check in CHECKS:
        checks.extend(check(ctx))
        if check is check_selection:
            checks.extend(check_autoload_cost(ctx, measure_imports))
    judged = judged_settings(registry)
    if not {c.name for c in checks} & set(judged):
        listed = ", ".join(judged[:-1]) + (" or " if len(judged) > 1 else "") + judged[-1]
        checks.insert(
            next(i for i, c in enumerate(checks) if c.name == "selection") + 1,
            Check("settings", "ok", f"no conflicting {listed}"),
        )
    return [one_line(c) for c in checks]


def _joined(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def one_line(check: Check) -> Check:
    """``check`` in the report's one shape: message and fix on one line each, the fix without a "Fix:" label."""
    message = clean(_joined(check.message), LINE_LIMIT)
    fix = clean(_joined(check.fix), LINE_LIMIT) if check.fix else None
    if fix and fix.lower().startswith("fix:"):
        fix = fix[4:].strip()
    return Check(clean(check.name, 120), check.status, message, fix or None)


def imported_modules(registry: Registry) -> list[str]:
    """torch and the devices' vendor modules (``DeviceSpec.vendor_modules``) this process has imported."""
    modules = {"torch", *(m for name in registry.names() for m in registry.get(name).spec.vendor_modules)}
    return sorted(m for m in modules if m in sys.modules)


def healthy(checks: Sequence[Check], strict: bool = False) -> bool:
    """No failed check (and, with ``strict``, no warning)."""
    bad = ("fail", "warn") if strict else ("fail",)
    return not any(c.status in bad for c in checks)


def render(checks: Sequence[Check], strict: bool = False) -> str:
    """The text report: one line per check, its fix on the same line."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        fix = f"  -> fix: {c.fix}" if c.fix and c.status in ("warn", "fail") else ""
        lines.append(f"{MARK[c.status]}  {c.name:<{width}}  {c.message}{fix}")
    fails, warns = (sum(c.status == s for c in checks) for s in ("fail", "warn"))
    if healthy(checks, strict):
        lines.append("healthy" + (f" ({warns} warning(s))" if warns else ""))
    else:
        lines.append(f"{fails} problem(s), {warns} warning(s): apply the fixes above and run `anydevice doctor` again")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry point of ``anydevice doctor``."""
    parser = argparse.ArgumentParser(prog="anydevice doctor", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print the checks as JSON for tools")
    parser.add_argument("--strict", action="store_true", help="treat warnings as problems (non-zero exit)")
    parser.add_argument("--measure-imports", action="store_true", help="time `import torch` with and without autoload")
    args = parser.parse_args(argv)
    with guard.commands_stdout_kept():  # a plugin's print() must not break `doctor --json`
        checks = run_checks(measure_imports=args.measure_imports)
        imported = imported_modules(get_registry())
    ok = healthy(checks, args.strict)
    if args.json:
        data: dict[str, Any] = {
            "healthy": ok,
            "problems": sum(c.status == "fail" for c in checks),
            "warnings": sum(c.status == "warn" for c in checks),
            "checks": [asdict(c) for c in checks],
            "imported": imported,
        }
        print(json.dumps(data, indent=2))
    else:
        print(render(checks, args.strict))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
