"""``anydevice plan SCRIPT [ARGS...] --target tpu:v5e-8,tpu:v5p-8,cuda:h100x8 [--mesh fsdp=-1] [--price tpu-v5e=1.2]
[--budget N] [--compose|--no-compose] [--json]``: what fits, how fast, at what cost (docs/plan.md).

The script's first step runs on the CPU in check's child process (the same observation, contained as check's);
the child then plans that step per target: compiled by libtpu for a TPU slice, estimated elsewhere. Exit status:
0 when some target fits as written, 1 when none does, 2 on usage errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from anydevice.errors import AnyDeviceError

USAGE = (
    "usage: anydevice plan SCRIPT [ARGS...] --target DEVICES [--mesh AXIS=N,...] [--price DEVICE-CHIP=USD,...] "
    "[--budget N] [--compose | --no-compose] [--timeout S] [--json] [-- SCRIPT ARGS]"
)
VALUED = ("--target", "-t", "--mesh", "--price", "--budget", "--timeout")
FLAGS = ("--json", "--compose", "--no-compose", "--allow-writes")


def split(argv: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """(plan's options, SCRIPT, the script's arguments); plan's options may come before or after SCRIPT."""
    options: dict[str, Any] = {}
    script: str | None = None
    rest: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            rest += list(tokens)
            break
        name, eq, inline = token.partition("=")
        if name in VALUED:
            value = inline if eq else next(tokens, None)
            if value is None:
                raise AnyDeviceError(f"{name} needs a value.", USAGE)
            options["--target" if name == "-t" else name] = value
        elif token in FLAGS:
            options[token] = True
        elif script is None and token.startswith("-"):
            raise AnyDeviceError(f"Unknown option {token!r} before SCRIPT.", USAGE)
        elif script is None:
            script = token
        else:
            rest.append(token)
    if script is None or "--target" not in options:
        raise AnyDeviceError("anydevice plan needs SCRIPT and --target.", USAGE)
    return options, script, rest


def _count(options: dict[str, Any], name: str, default: int) -> int:
    text = options.get(name)
    if text is None:
        return default
    if not str(text).isdigit():
        raise AnyDeviceError(f"{name} {text!r}: write a whole number of 0 or more.", USAGE)
    return int(text)


def main(argv: list[str]) -> int:
    """``anydevice plan``: 0 when some target fits as written, 1 otherwise, 2 on usage errors."""
    if argv[:1] in (["-h"], ["--help"]) or not argv:
        print((__doc__ or "").strip().split("\n\n")[0] + "\n\n" + USAGE)
        return 0 if argv else 2
    from anydevice.cli.check import observe, parse_mesh
    from anydevice.planner.child import ENV
    from anydevice.planner.declared import parse_prices
    from anydevice.planner.rows import plan_targets
    from anydevice.preflight.compiled import require_compiler, slice_compiler, split_target

    options, script, args = split(argv)
    targets = plan_targets(options["--target"])
    mesh = parse_mesh(options["--mesh"]) if "--mesh" in options else None
    prices = parse_prices(options.get("--price"))
    compose = True if options.get("--compose") else False if options.get("--no-compose") else None
    budget, timeout = _count(options, "--budget", 8), float(_count(options, "--timeout", 3600))
    path = Path(script)
    if not path.is_file():
        raise AnyDeviceError(f"No such script: {script}.", USAGE)
    require_compiler([t for t in targets if split_target(t)[1] is not None and slice_compiler(split_target(t)[0]) is not None])
    request = {"targets": targets, "mesh": mesh, "price": prices, "budget": budget, "compose": compose}
    os.environ[ENV] = json.dumps(request)  # read by the check child (anydevice.planner.child), inherited through its environment
    try:
        observed = observe(path, args, 1, 0, timeout, mesh, targets, allow_writes=bool(options.get("--allow-writes")))
    finally:
        os.environ.pop(ENV, None)
    if "plan" not in observed:
        raise AnyDeviceError(
            f"{script}: the plan did not finish in the child process (it stopped after the observed step).",
            "Run with ANYDEVICE_DEBUG=1, or report it to anydevice with the script.",
        )
    result: dict[str, Any] = observed["plan"]
    if options.get("--json"):
        print(json.dumps(result, indent=2, default=str))
    else:
        from anydevice.planner.table import render

        print(render(result))
    return 0 if any(r["as_written"]["fits"] for r in result["targets"]) else 1
