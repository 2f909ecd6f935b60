"""``anydevice launch SCRIPT [ARGS...] --target TARGET --emit skypilot|jobset|slurm``: the cluster spec for a target.

    anydevice launch train.py --steps 100 --target tpu:v5e-16 --emit jobset --out train.yaml
    anydevice launch train.py --target cuda:h100x8x2 --emit slurm --out train.sbatch
    anydevice launch examples/train.py --steps 3 --target cpu:1x2 --emit skypilot --rehearse

Writes the spec (stdout, or ``--out FILE``, made with its folders; an existing regular file is replaced only with
``--force``; ``-``: stdout). On a target whose device compiles for its slices (TPU), ``anydevice check SCRIPT
--target TARGET`` runs first (``--no-check`` skips it; ``--check`` asks for it on any target): a step that will
not compile, fit or launch there is refused, or with
``--force`` written with the verdict in a comment. ``--rehearse`` (a cpu target) runs the spec's start command
here once per host with the engine's variables, and prints the main rank's last line. launch's own options may
come before or after SCRIPT; a script argument spelled like one of them goes after ``--``.
Exit status: 0 written (and rehearsed), 1 refused by the check or a failed rehearsal, 2 usage errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anydevice.errors import AnyDeviceError, UsageError

OWN = {
    "--target": True,
    "-t": True,
    "--emit": True,
    "--out": True,
    "-o": True,
    "--name": True,
    "--port": True,
    "--image": True,
    "--timeout": True,
    "--check": False,
    "--no-check": False,
    "--force": False,
    "--rehearse": False,
}
SHORT = {"-t": "--target", "-o": "--out"}
USAGE = (
    "usage: anydevice launch SCRIPT [ARGS...] --target TARGET --emit skypilot|jobset|slurm [--out FILE] "
    "[--check | --no-check] [--force] [--name NAME] [--port PORT] [--image IMAGE] [--rehearse] [-- SCRIPT ARGS]"
)
TARGETS = "e.g. --target DEVICE:CHIP-COUNT (a slice or a host), DEVICE:CHIP-COUNTxHOSTS, cpu:1x2"
REFUSED = ("will not compile", "will not fit", "will not launch")
"""Check verdicts that refuse the spec (``--force`` writes it with the verdict in a comment)."""


def split(argv: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """(launch's options, SCRIPT, the script's arguments) from the command line."""
    options: dict[str, Any] = {}
    script: str | None = None
    rest: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            rest += list(tokens)
            break
        name, eq, inline = token.partition("=")
        if name in OWN:
            key = SHORT.get(name, name)
            if OWN[name]:
                value = inline if eq else next(tokens, None)
                if value is None or value == "":
                    raise UsageError(f"{name} needs a value.", USAGE)
                options[key] = value
            elif eq:
                raise UsageError(f"{name} takes no value.", USAGE)
            else:
                options[key] = True
        elif script is None:
            if token.startswith("-"):
                raise UsageError(f"Unknown option {token} before the script.", USAGE)
            script = token
        else:
            rest.append(token)
    if script is None:
        raise UsageError("No script given.", USAGE)
    for needed, example in (("--target", TARGETS), ("--emit", "choose --emit skypilot, jobset or slurm")):
        if needed not in options:
            raise UsageError(f"No {needed} given.", f"{USAGE}\n{example}.")
    if options.get("--check") and options.get("--no-check"):
        raise UsageError("--check and --no-check contradict each other.", "Give one of them.")
    return options, script, rest


def _int(options: dict[str, Any], name: str, default: int, minimum: int = 0) -> int:
    raw = options.get(name, default)
    if not str(raw).isascii() or not str(raw).isdigit() or int(raw) < minimum:
        raise UsageError(f"{name} must be a whole number{f' of {minimum} or more' if minimum else ''}, not {raw!r}.", USAGE)
    return int(raw)


@dataclass(frozen=True)
class Checked:
    """What ``anydevice check`` said of the step on the target."""

    target: str
    verdict: str
    reason: str
    fixes: tuple[str, ...]
    compiled: str | None

    def notes(self) -> list[str]:
        """The spec header's lines: the verdict, the compiler's answer, the fixes."""
        compiled = [f"  {self.compiled}"] if self.compiled else []
        fixes = [f"  fix: {fix}" for fix in self.fixes] if self.verdict != "runs" else []
        return [f"anydevice check --target {self.target}: {self.verdict.upper()}: {self.reason}", *compiled, *fixes]


def check_verdict(script: str, args: list[str], target: str, timeout: int) -> Checked:
    """``anydevice check SCRIPT --target TARGET --json`` in a child, read; a check that could not run is an error saying why."""
    command = [sys.executable, "-m", "anydevice", "check", script, "--target", target, "--json", "--timeout", str(timeout)]
    command += ["--", *args]  # the script's own, even where spelled like check's options (--steps, --target)
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode not in (0, 1):
        said = done.stderr.strip().removeprefix("anydevice: error: ") or f"it exited with status {done.returncode}"
        raise AnyDeviceError(
            f"The check before the spec could not run: {said}",
            "Fix that, or pass --no-check to write the spec unchecked.",
        )
    report = json.loads(done.stdout)
    (judged,) = report["targets"]
    errors = [f for f in judged["findings"] if f["severity"] == "error"] or judged["findings"]
    reason = (
        (errors[0]["message"] + (f" ({errors[0]['line']})" if errors[0].get("line") else "")) if errors else judged["summary"]
    )
    fixes = tuple(f for f in judged.get("fixes", []) if f)
    return Checked(target, str(judged["verdict"]), str(reason), fixes, _compiled(judged.get("compile")))


def _compiled(step: dict[str, Any] | None) -> str | None:
    """The compiler's answer for a slice, as a line of the spec's header (None when nothing was compiled)."""
    if not step:
        return None
    if not step.get("ok"):
        return f"compiled for {step['topology']} by {step['compiler']}: {step.get('error') or 'failed'}"
    total, capacity = step.get("per_chip_bytes", {}).get("total"), step.get("capacity_bytes")
    size = f"{total / 2**20:,.1f} MiB" if total is not None else "an unknown size"
    of = f" of {capacity / 2**30:,.2f} GiB" if capacity else ""
    return f"compiled for {step['topology']} by {step['compiler']}: {size}{of} per chip"


def main(argv: list[str]) -> int:
    """``anydevice launch``: 0 written, 1 refused by the check or a failed rehearsal, 2 usage errors."""
    if argv[:1] in (["-h"], ["--help"]) or not argv:
        print((__doc__ or "").strip() + "\n\n" + USAGE)
        return 0 if argv else 2
    from anydevice.launch_specs import ENGINES, Plan, parse_target, write

    options, script, args = split(argv)
    engine = options["--emit"]
    if engine not in ENGINES:
        raise UsageError(f"--emit {engine!r} is not an engine anydevice writes for.", f"Choose one of: {', '.join(ENGINES)}.")
    if engine == "slurm" and "--image" in options:
        raise UsageError("--image is for skypilot and jobset: an sbatch script runs on the hosts' own Python.", "Drop --image.")
    target = parse_target(options["--target"])
    timeout = _int(options, "--timeout", 600, minimum=1)  # before the check or rehearsal it bounds starts
    kwargs: dict[str, Any] = {"name": options.get("--name") or _job_name(script), "image": options.get("--image")}
    if "--port" in options:
        kwargs["port"] = _int(options, "--port", 0)
    plan = Plan(target, script, tuple(args), **kwargs)
    if options.get("--rehearse"):
        from anydevice.launch_specs.rehearse import require_cpu

        require_cpu(plan)
    out = Path(options["--out"]) if options.get("--out", "-") != "-" else None  # '-': stdout, as without --out
    if out is not None:
        _check_out(out, bool(options.get("--force")))
    if not Path(script).is_file():
        raise UsageError(
            f"No such script: {script}.", "Name the training script as it is found from here (its path on the hosts is the same)."
        )
    notes: list[str] = []
    compiles = target.slice and _has_compiler(target.device)
    if options.get("--check") or (compiles and not options.get("--no-check")):
        judged_as = target.text if compiles else target.device  # a slice is compiled for; another device is judged
        checked = check_verdict(script, args, judged_as, timeout)
        if checked.verdict in REFUSED and not options.get("--force"):
            print(
                f"anydevice: error: {script} {checked.verdict} on {checked.target}, so no spec was written: {checked.reason}",
                file=sys.stderr,
            )
            for line in checked.notes()[1:]:
                print(line, file=sys.stderr)
            print("  --force writes it anyway with this verdict in a comment; --no-check skips the check.", file=sys.stderr)
            return 1
        notes += checked.notes()
    elif not compiles:
        notes.append(f"not checked: {target.device} declares no compiler for its slices (--check runs anydevice check first)")
    else:
        notes.append("not checked (--no-check)")
    text = write(engine, plan, tuple(notes))
    if out is None:
        sys.stdout.write(text)
    else:
        from anydevice.files.safe_files import write_bytes

        write_bytes(out, text.encode("utf-8"), force=bool(options.get("--force")), force_hint="pass --force")
        if engine == "slurm":
            os.chmod(out, 0o755)
        print(f"anydevice: wrote {out} ({engine}, {target.text})", file=sys.stderr)
    if options.get("--rehearse"):
        return _rehearse(engine, plan, timeout)
    return 0


def _check_out(out: Path, force: bool) -> None:
    """Before any work: ``--out`` names a regular file or nothing yet (its folders are made); a directory, FIFO or
    device (or a link to one) is refused even with ``--force``, never opened; an existing file only with ``--force``."""
    from anydevice.files.safe_files import existing_regular

    existing_regular(out, "write the spec to")
    if os.path.lexists(out) and not force:
        raise UsageError(f"--out {out} exists.", "Choose another file, or pass --force to replace it.")


def _rehearse(engine: str, plan: Any, timeout: int) -> int:
    from anydevice.launch_specs.rehearse import rehearse

    runs = rehearse(engine, plan, timeout)
    failed = [r for r in runs if r.returncode != 0]
    for run in failed:
        tail = "\n".join(run.stderr.strip().splitlines()[-15:])
        print(f"anydevice: rehearsal host {run.host} exited {run.returncode}:\n{tail}", file=sys.stderr)
    last = [line for r in runs for line in r.stdout.strip().splitlines()[-1:]]
    if last:
        print(last[0])
    print(f"anydevice: rehearsed {engine} on {plan.target.hosts} host(s) here: {'failed' if failed else 'ok'}", file=sys.stderr)
    return 1 if failed else 0


def _has_compiler(device: str) -> bool:
    from anydevice.runtime.registry import get_registry

    return get_registry().get(device).spec.check.slice_compiler is not None


def _job_name(script: str) -> str:
    """A job name from the script's file name (``train_llama.py`` -> ``train-llama``)."""
    stem = "".join(c if c.isascii() and c.isalnum() else "-" for c in Path(script).stem.lower()).strip("-")
    return stem[:40].strip("-") or "anydevice"
