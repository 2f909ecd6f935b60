"""``anydevice check SCRIPT [ARGS...] --target tpu,neuron,xla [--json] [--steps N] [-n N] [--mesh dp=2,tp=4]``: will it run there?

Runs the script's first N steps on the CPU in a child process (:mod:`anydevice.preflight.runner`, with
cuda-compat on so CUDA-written scripts run too) in a scratch working directory, then prints a report per
target: what the CPU run showed, judged against what each target declares (not a run on the target).
check's own options may come before or after SCRIPT; a script argument with the same name as one
of them goes after ``--``. Exit status: 0 every target "runs", 1 otherwise, 2 usage errors.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from anydevice.errors import AnyDeviceError

OWN = {
    "--target": True,
    "-t": True,
    "--steps": True,
    "-n": True,
    "--nproc": True,
    "--mesh": True,
    "--timeout": True,
    "--json": False,
}
USAGE = (
    "usage: anydevice check SCRIPT [ARGS...] --target DEVICES [--json] [--steps N] [-n N] [--mesh AXIS=N,...] "
    "[--timeout S] [-- SCRIPT ARGS]"
)
DROPPED = frozenset({"ANYDEVICE_STRICT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR"})
"""Variables the child must not inherit: it runs one plain process on the CPU."""


def split(argv: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """(check's options, SCRIPT, the script's arguments) from the command line."""
    options: dict[str, Any] = {"--json": False}
    script: str | None = None
    rest: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            rest += list(tokens)
            break
        name, _, inline = token.partition("=")
        if name in OWN:
            if OWN[name]:
                value = inline or next(tokens, None)
                if value is None:
                    raise AnyDeviceError(f"{name} needs a value.", USAGE)
                options[{"-t": "--target", "-n": "--nproc"}.get(name, name)] = value
            else:
                options[name] = True
        elif script is None:
            if token.startswith("-"):
                raise AnyDeviceError(f"Unknown option {token} before the script.", USAGE)
            script = token
        else:
            rest.append(token)
    if script is None:
        raise AnyDeviceError("No script given.", USAGE)
    if "--target" not in options:
        raise AnyDeviceError("No --target given.", f"{USAGE}\nName one or more devices, e.g. --target tpu,neuron,xla.")
    return options, script, rest


def _count(options: dict[str, Any], name: str, default: int) -> int:
    raw = options.get(name, default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise AnyDeviceError(f"{name} must be a whole number of 1 or more, not {raw!r}.", USAGE)
    return value


MESH_EXAMPLE = f"{USAGE}\ne.g. --mesh dp=-1,tp=4"


def parse_mesh(text: str) -> dict[str, int]:
    """``dp=2,tp=4`` (``-1``: what is left of the world) -> ``{"dp": 2, "tp": 4}``; anything else is a usage error."""
    mesh: dict[str, int] = {}
    for part in text.split(","):
        axis, _, size = (s.strip() for s in part.partition("="))
        if not axis or axis in mesh:
            raise AnyDeviceError(f"--mesh {text!r}: each axis needs a distinct name.", MESH_EXAMPLE)
        try:
            mesh[axis] = int(size)
        except ValueError:
            raise AnyDeviceError(f"--mesh {text!r}: {part.strip()!r} is not AXIS=N.", MESH_EXAMPLE) from None
    return mesh


# The guardian: a bare interpreter (-S, no anydevice import) in its own session, holding the read end of a pipe
# only check writes. It reads the child's process group from it; at EOF (check ended in any way, ``kill -9``
# included) it kills that group unless check wrote "done" (it already did), and removes the temporary folder.
_GUARDIAN = r"""
import os, shutil, signal, sys
for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
data = b""
while True:
    chunk = os.read(0, 1024)
    if not chunk:
        break
    data += chunk
words = data.split()
if words and words[0].isdigit() and b"done" not in words:
    try:
        os.killpg(int(words[0]), signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


def _guardian(folder: str) -> int:
    """Start the guardian of ``folder`` and the child to come; returns the pipe's write end (close it last)."""
    read, write = os.pipe()
    try:
        subprocess.Popen(
            [sys.executable, "-S", "-c", _GUARDIAN, folder],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env={},  # it needs nothing, and carries none of the run's variables
        )
    finally:
        os.close(read)
    return write


def _dies_with(parent: int) -> Any:
    """``preexec_fn`` of the child: SIGKILL when check ends (``anydevice run``'s parent-death signal)."""
    from anydevice.cli.rank_start import parent_death_signal

    def start() -> None:
        parent_death_signal()  # where it cannot be set, the guardian still ends the child
        if os.getppid() != parent:  # check ended before the line above took effect
            os._exit(1)

    return start


def observe(
    script: Path,
    args: list[str],
    steps: int,
    world: int,
    timeout: float,
    mesh: dict[str, int] | None = None,
    compile_targets: list[str] | None = None,
) -> dict[str, Any]:
    """Run the script's first ``steps`` steps on the CPU in a child process; its observation as a dict.

    The child's working directory is an empty scratch folder (its relative writes land there; the user's files
    are read through :class:`~anydevice.preflight.scratch.ScratchView`); its standard input is ``/dev/null``.
    Everything it writes goes to a temporary folder removed afterwards; the child and its whole process group
    (DataLoader workers included) end with check, on any signal, ``kill -9`` included. ``compile_targets``
    (``["tpu:v5e-8"]``): the child then compiles the step for each slice with the plugin's slice compiler.
    """
    from anydevice.preflight.runner_protocol import COMPILE_REQUEST, COMPILING

    tmp = tempfile.mkdtemp(prefix="anydevice-check-")
    guardian = _guardian(tmp)
    try:
        work = Path(tmp) / "workdir"
        work.mkdir()
        out = Path(tmp) / "observation.json"
        if compile_targets:
            (Path(tmp) / COMPILE_REQUEST).write_text(json.dumps({"targets": compile_targets, "mesh": mesh}))
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        env.update(
            ANYDEVICE="cpu",
            ANYDEVICE_CUDA_COMPAT="1",
            ANYDEVICE_QUIET="1",
            TMPDIR=tmp,
            ANYDEVICE_CACHE_DIR=str(Path(tmp) / "cache"),
            TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
            PYTHONDONTWRITEBYTECODE="1",  # no __pycache__ written next to the user's modules (existing caches are read)
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)  # as `python -m` from there
        shape = json.dumps(mesh) if mesh is not None else "-"
        command = [sys.executable, "-m", "anydevice.preflight.runner", str(out), str(steps), str(world), shape, os.getcwd()]
        command += [str(script.resolve()), *args]
        child = subprocess.Popen(
            command,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=_dies_with(os.getpid()),
        )
        os.write(guardian, f"{child.pid}\n".encode())  # its process group (a new session: the group is its pid)
        output = ""
        try:
            output, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            if (Path(tmp) / COMPILING).exists():  # the CPU run ended; a compile was under way
                return _stopped_compile(out, Path(tmp) / COMPILING, f"did not finish within --timeout {timeout:g} s")
            raise AnyDeviceError(
                f"{script} did not reach {steps} step(s) on the CPU within {timeout:g} s.{_tail(output)}",
                "Lower --steps, or raise --timeout.",
            ) from None
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)  # the child's group: loader workers and anything it started
            except (ProcessLookupError, PermissionError):
                pass
            child.wait()
            os.write(guardian, b"done\n")
        if (Path(tmp) / COMPILING).exists() and child.returncode and child.returncode < 0:
            why = "was killed (out of host memory?)" if child.returncode == -signal.SIGKILL else f"died ({child.returncode})"
            return _stopped_compile(out, Path(tmp) / COMPILING, f"{why} on this machine")
        if not out.exists():
            raise AnyDeviceError(
                f"{script} ended on the CPU without a result (exit {child.returncode}).{_tail(output)}", _RUN_ON_CPU
            )
        data: dict[str, Any] = json.loads(out.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(guardian)
    if "error" in data:
        hint = _HINTS["stdin"] if data.get("stdin") else _HINTS.get(data["error"], _RUN_ON_CPU)
        raise AnyDeviceError(_explain(script, data) + _tail(output), hint)
    return data


def _stopped_compile(out: Path, compiling: Path, why: str) -> dict[str, Any]:
    """The observation with the compile under way recorded as stopped (time or host memory): the slice's answer is unknown."""
    from anydevice.preflight.compiled import stopped_step

    data: dict[str, Any] = json.loads(out.read_text())
    target = compiling.read_text().strip()
    data.setdefault("compiled", {})[target] = stopped_step(
        target, f"the compile {why}: the slice's answer is unknown"
    ).model_dump()
    return data


def _tail(output: str, lines: int = 15) -> str:
    """The script's last lines of output (stdout and stderr), to show with an early end."""
    kept = [line for line in output.rstrip().splitlines() if line.strip()][-lines:]
    return ("\nthe script's last output:\n" + "\n".join(f"  | {line}" for line in kept)) if kept else ""


_RUN_ON_CPU = (
    "check runs the script's first steps on the CPU in a scratch working directory: make `ANYDEVICE=cpu python SCRIPT ...` "
    "run first; a file the script reads by a relative path is found in the folder check was run from."
)
_HINTS = {
    "no_model": "check needs a module with trainable parameters called with gradients on (model(batch), before "
    "optimizer.step()); or use ad.check(model, example_inputs, target=...) from Python.",
    "no_step": "without a DataLoader, check's step ends at optimizer.step(): run at least one, or call "
    "ad.check(model, example_inputs, target=...) from Python.",
    "stdin": "check gives the script no standard input (it reads /dev/null): pass what it asks for as arguments or "
    "files, or skip the prompt when stdin is not a terminal (sys.stdin.isatty()).",
}


def _explain(script: Path, data: dict[str, Any]) -> str:
    if data["error"] == "compile_refused":
        return str(data["message"])
    if data["error"] == "no_model":
        return f"{script} never called a module with trainable parameters with gradients on: no training step to observe."
    if data["error"] == "no_step":
        return (
            f"{script} called its model but never stepped an optimizer (and iterated no DataLoader): no training step to observe."
        )
    if data.get("exit"):
        return f"{script} {data['error'].removeprefix('the script ')}."
    where = f" at {data['line']}" if data.get("line") else ""
    reading = " (it read its standard input, which check closes)" if data.get("stdin") else ""
    return f"{script} failed on the CPU before its first step{where}: {data['error']}{reading}"


def render(report: Any) -> str:
    """The human report: one block per target, findings with lines and fixes, worst first."""
    obs = report.observation
    mem = obs.memory
    versions = ", ".join(f"{k} {v}" for k, v in obs.versions.items())
    lines = [f"anydevice check: {report.kind} ({report.script or 'model'}: {obs.steps} step(s); {versions})"]
    if obs.run is not None:
        wrote = ", ".join(obs.run.files[:8]) + (f" and {len(obs.run.files) - 8} more" if len(obs.run.files) > 8 else "")
        lines.append(
            "ran in a scratch working directory, removed afterwards: "
            + (f"the files the script wrote went there, not to yours ({wrote})" if obs.run.files else "the script wrote no file")
        )
    lines += [
        f"seen: {len(obs.signatures)} input signature(s) in {sum(s.batches for s in obs.signatures)} batch(es); "
        f"{obs.capture.graph_count if obs.capture.graph_count is not None else '?'} graph(s), "
        f"{obs.capture.graph_break_count if obs.capture.graph_break_count is not None else '?'} graph break(s); "
        f"{len(obs.ops)} ATen ops ({len(obs.core_aten)} core ATen in the forward); dtypes {', '.join(obs.dtypes) or 'none'}"
        + (f"; {mem.total / 2**20:.1f} MiB per replica" if mem else "")
        + (f"; {len(obs.collectives)} collective(s)" if obs.collectives else "")
        + (f"; mesh {', '.join(f'{a}={n}' for a, n in obs.mesh.items())} over {obs.world_size}" if obs.mesh else ""),
    ]
    from anydevice.preflight.compiled import compiled_lines
    from anydevice.preflight.text import findings_block

    for t in report.targets:
        lines += ["", f"{t.target}: {t.summary.upper()}", *findings_block(t.findings, t.fixes)]
        lines.append(f"  sources: {'; '.join(t.sources)}")
        statuses = ("native", "cpu_fallback", "unsupported", "unknown")
        marks = {status: sum(v.status == status for v in t.ops) for status in statuses}
        lines.append(f"  ops: {len(t.ops)} marked: " + ", ".join(f"{n} {status}" for status, n in marks.items() if n))
        if t.compile is not None:
            lines += compiled_lines(t.compile)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``anydevice check``: 0 when every target runs, 1 otherwise, 2 on usage errors."""
    if argv[:1] in (["-h"], ["--help"]) or not argv:
        print(__doc__.strip().split("\n\n")[0] + "\n\n" + USAGE)
        return 0 if argv else 2
    from anydevice.preflight import report, targets_of
    from anydevice.preflight.compiled import require_compiler, slice_targets
    from anydevice.preflight.schema import Observation

    options, script, args = split(argv)
    targets = targets_of(options["--target"])
    mesh = parse_mesh(options["--mesh"]) if "--mesh" in options else None
    whole = mesh is not None and all(size > 0 for size in mesh.values())
    default_world = math.prod(mesh.values()) if mesh is not None and whole else 1  # --mesh dp=2,tp=4 alone: 8 processes
    steps, world = _count(options, "--steps", 4), _count(options, "--nproc", default_world)
    if "--nproc" not in options and mesh is None:
        world = 0  # not given: the runner takes the world from the script's own mesh, if it makes one (else 1)
    timeout = float(_count(options, "--timeout", 600))
    path = Path(script)
    if not path.is_file():
        raise AnyDeviceError(f"No such script: {script}.", USAGE)
    require_compiler(targets)
    compile_targets = slice_targets(targets)
    observation = Observation.model_validate(observe(path, args, steps, world, timeout, mesh, compile_targets))
    result = report(observation, targets, script=script)
    if options["--json"]:
        print(result.model_dump_json(indent=2))
    else:
        print(render(result))
    return 0 if result.ok else 1
