"""The ``anydevice`` command line: a thin layer over the library.

    anydevice list | info [--json] | doctor | run [-n N] script.py ... | check SCRIPT --target ... | plan SCRIPT --target ...
    anydevice export ... | serve-spec --role R --device D | pd-rehearsal ... | launch SCRIPT --target ... --emit ...
    anydevice matrix probe|render ...

``list`` and ``info`` are here; the other commands live in their own modules (:data:`DELEGATED`), and
``tests/docs/test_structure_docs.py`` holds this list to them.

Errors are printed as one or a few sentences without a traceback (``ANYDEVICE_DEBUG=1`` shows it).
Exit status: 0 success; 1 ``doctor`` found problems; 2 a usage or selection error, and bare
``anydevice`` (help on stderr, as click, git and argparse do for a missing command); 130
interrupted; 141 stdout was closed early (``anydevice list | head -1``), which ends quietly.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any

from anydevice import settings
from anydevice.errors import AnyDeviceError, PluginError
from anydevice.runtime import guard
from anydevice.runtime.untrusted import clean_tree

COMMANDS_GROUP = "anydevice.commands"
"""Entry points naming modules above the CLI that add a subcommand (the matrix's ``anydevice matrix``): the CLI
finds them by name when asked, so it never imports a layer above it (docs/architecture.md)."""

# Subcommands implemented in their own modules: name -> (module, help); a module None is found in COMMANDS_GROUP
DELEGATED: dict[str, tuple[str | None, str]] = {
    "doctor": ("anydevice.cli.doctor", "diagnose the environment; non-zero exit with fixes on problems"),
    "run": ("anydevice.cli.launch", "launch N processes the device's way (torchrun, spawn, ...)"),
    "matrix": (None, "run the probe suite or render the compatibility matrix"),
    "export": ("anydevice.cli.export", "convert a model for an edge runtime (LiteRT), checked against PyTorch"),
    "serve-spec": ("anydevice.cli.serve_spec", "an llm-d model server's overlay or endpoints entry for --role and --device"),
    "pd-rehearsal": ("anydevice.cli.pd_rehearsal", "prefill and decode vLLM CPU servers behind vllm-router, against one server"),
    "check": ("anydevice.cli.check", "will SCRIPT run on --target tpu,neuron,xla? its first steps run on the CPU, then judged"),
    "plan": (
        "anydevice.cli.plan",
        "which slice fits SCRIPT's step, with which batch, checkpointing and mesh, how fast, at what cost",
    ),
    "launch": ("anydevice.cli.launch_spec", "the SkyPilot task, JobSet or sbatch script for --target DEVICE:CHIP-COUNT"),
}


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def cmd_list(args: argparse.Namespace) -> int:
    """Every plugin found: available or not, and why."""
    from anydevice.runtime.registry import get_registry

    with guard.commands_stdout_kept():  # a plugin's print() must not break `list --json`
        registry = get_registry()
        detections = registry.detect_all()
    rows: list[dict[str, Any]] = []
    for name in registry.names():
        entry, det = registry.get(name), detections[name]
        rows.append(
            {
                "name": name,
                "available": det.available,
                "reason": det.reason,
                "fix": det.fix,
                "problem": det.problem,
                "plugin": entry.plugin,
                "distribution": entry.distribution,
                "priority": entry.spec.priority,
                "aliases": list(entry.spec.aliases),
                "chip": det.chip,
                "count": det.count,
                "verified_on_hardware": entry.spec.verified_on_hardware,
                "evidence": entry.spec.evidence.as_dict(),
            }
        )
    broken = [{"plugin": f.plugin, "stage": f.stage, "error": f.error} for f in registry.failures]
    rows, broken = clean_tree(rows), clean_tree(broken)  # plugin text: no escape sequences, no 5 MB reasons
    if args.json:
        _print_json({"devices": rows, "broken_plugins": broken})
        return 0
    width = max((len(str(r)) for r in [*(r["name"] for r in rows), *(b["plugin"] for b in broken)]), default=4)
    for r in rows:
        mark = "✓ available  " if r["available"] else "✗ unavailable"
        evidence = r["evidence"]  # the words only here; `list --json` and `info` carry the source
        extra = f" [{evidence['label']}]" if r["verified_on_hardware"] else f" [not verified on hardware: {evidence['words']}]"
        print(f"{r['name']:<{width}}  {mark}  {r['reason']}{extra}")
        if not r["available"] and r["fix"]:
            print(f"{'':<{width}}                 fix: {r['fix']}")
    for b in broken:
        if b["stage"] == "clash":
            print(f"{b['plugin']:<{width}}  ! name clash   {b['error']}")
        else:
            print(f"{b['plugin']:<{width}}  ! broken       plugin failed at {b['stage']}: {b['error']}")
    return 0


def imported_vendor_modules() -> list[str]:
    """The devices' vendor modules (``DeviceSpec.vendor_modules``) this process has imported."""
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    declared = {m for name in registry.names() for m in registry.get(name).spec.vendor_modules}
    return sorted(m for m in declared if m in sys.modules)


def environment_info() -> dict[str, Any]:
    """Versions and imported vendor modules, for ``info`` and bug reports."""
    from anydevice.contract import detect
    from anydevice.release import VERSION

    return {
        "anydevice": VERSION,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": detect.torch_version(),
        "requested": settings.ANYDEVICE.get(),
        "imported_vendor_modules": imported_vendor_modules(),
    }


def cmd_info(args: argparse.Namespace) -> int:
    """What ANYDEVICE selects here, with versions."""
    from anydevice.capability_query import capabilities, render
    from anydevice.runtime.backend import current
    from anydevice.runtime.registry import get_registry

    with guard.commands_stdout_kept():  # a plugin's print() must not break `info --json`
        backend = current(announce=False)
        try:
            described = get_registry().call(backend.plugin, "info", backend.as_dict)  # shim methods: guarded too
        except guard.PluginCallError as exc:
            raise PluginError(exc.plugin, f"{exc.error} (at {exc.stage})") from exc.cause
        data = {**environment_info(), "backend": described}  # "why" below says it all
        data["capabilities"] = capabilities().as_dict()
        data["imported_vendor_modules"] = imported_vendor_modules()
    data = clean_tree(data)
    if args.json:
        _print_json(data)
        return 0
    b = data["backend"]
    print(f"device     {b['device']}  ({b['name']} via plugin {b['plugin']}, {b['count']} visible)")
    print(f"chip       {b['chip'] or 'unknown'}")
    print(f"why        {b['why']}")
    print(f"compile    {b['compile_backend']}    collectives {b['dist_backend']}    launcher {b['launcher']}")
    versions = {"anydevice": data["anydevice"], "python": data["python"], **b["versions"]}
    print("versions   " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(render(data["capabilities"]))
    print("vendor modules imported: " + (", ".join(data["imported_vendor_modules"]) or "none"))
    return 0


def _delegate(name: str) -> Callable[[list[str]], int]:
    module_name, _ = DELEGATED[name]
    if module_name is None:
        from importlib.metadata import entry_points

        found = [ep.value for ep in entry_points(group=COMMANDS_GROUP, name=name)]
        if not found:
            raise AnyDeviceError(f"'anydevice {name}' is not installed here (no '{name}' entry point in {COMMANDS_GROUP})")
        module_name = found[0]
    module = importlib.import_module(module_name)
    main: Callable[[list[str]], int] = module.main
    return main


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``list`` and ``info`` here, the other subcommands in their own modules."""
    from anydevice.release import VERSION

    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="anydevice",
        description="PyTorch on any accelerator: one switch, ANYDEVICE.",
        epilog="Run `anydevice COMMAND --help` for a command's options. Exit status: 0 ok, 1 doctor found problems, "
        "2 usage or selection error, 130 interrupted.",
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"anydevice {VERSION}", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_list = sub.add_parser("list", help="every plugin found: available or not, and why", formatter_class=formatter)
    p_list.add_argument("--json", action="store_true", help="print the devices and broken plugins as JSON for tools")
    p_list.set_defaults(func=cmd_list)
    p_info = sub.add_parser("info", help="what ANYDEVICE selects here, with versions", formatter_class=formatter)
    p_info.add_argument("--json", action="store_true", help="print the selection, versions and why as JSON for tools")
    p_info.set_defaults(func=cmd_info)
    for name, (_, help_text) in DELEGATED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``anydevice`` and ``python -m anydevice``.

    As the process's entry point (``argv`` None), the command ends once its output is written, even when a
    plugin left a thread or an exit handler that would keep the process alive (:mod:`anydevice.cli.ending`).
    """
    code = _command(argv)
    if argv is None:
        from anydevice.cli import ending

        code = ending.finish(code)
    return code


def _command(argv: Sequence[str] | None) -> int:
    standard_streams()
    from anydevice import startup

    startup.exempt()  # the CLI is anydevice's own process: cuda-compat applies to the ranks it starts, not to it
    try:
        try:
            return _main(list(sys.argv[1:] if argv is None else argv))
        finally:  # also after argparse's SystemExit (--help): a closed pipe surfaces here as often as in print()
            sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE


def _main(argv: list[str]) -> int:
    try:
        if not argv:  # bare `anydevice`: the help, as a usage error (click, git)
            build_parser().print_help(sys.stderr)
            return 2
        from anydevice.runtime import autoload

        settings.validate()  # every setting's range, before anything reads one
        with guard.commands_stdout_kept():  # loads the plugins: what they print goes to stderr
            autoload.apply()  # before anything imports torch: no unselected torch_tpu import
        if argv[0] in DELEGATED:
            return _delegate(argv[0])(argv[1:])
        args = build_parser().parse_args(argv)
        result: int = args.func(args)
        return result
    except AnyDeviceError as exc:
        if _debug():
            raise
        print(f"anydevice: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _debug() -> bool:
    try:
        return settings.ANYDEVICE_DEBUG.flag()
    except AnyDeviceError:
        return False  # a malformed ANYDEVICE_DEBUG is the error being reported


def standard_streams() -> None:
    """Give a closed stdin, stdout or stderr (``anydevice list >&-``: a daemon, a cron job) ``/dev/null``.

    What the command prints then goes nowhere and its exit status is its own. Also, the next file
    opened would otherwise take the free number 1 or 2, and what this process or a child (a rank)
    writes to stdout or stderr would land in that file.
    """
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
            except OSError:
                continue
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:  # Python found it closed at start-up
            setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again (Python's advice)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (an embedded or captured stdout)
        pass
