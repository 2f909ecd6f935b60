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
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
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
    "--allow-writes": False,
}
USAGE = (
    "usage: anydevice check SCRIPT [ARGS...] --target DEVICES [--json] [--steps N] [-n N] [--mesh AXIS=N,...] "
    "[--timeout S] [--allow-writes] [-- SCRIPT ARGS]"
)
DROPPED = frozenset({"ANYDEVICE_STRICT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR"})
"""Variables the child must not inherit: it runs one plain process on the CPU."""


def split(argv: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """(check's options, SCRIPT, the script's arguments) from the command line."""
    options: dict[str, Any] = {"--json": False, "--allow-writes": False}
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
# included) it kills that group unless check wrote "done" (it already did), then every process carrying the run's
# mark (ANYDEVICE_CHECK_RUN=argv[1]: a helper in a session of its own), and removes the temporary folders (argv[1:]).
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
marker = b"ANYDEVICE_CHECK_RUN=" + os.fsencode(sys.argv[1])
for entry in os.listdir("/proc"):
    try:
        with open(f"/proc/{entry}/environ", "rb") as f:
            if entry.isdigit() and marker in f.read().split(b"\0"):
                os.kill(int(entry), signal.SIGKILL)
    except OSError:
        pass
for folder in sys.argv[1:]:
    shutil.rmtree(folder, ignore_errors=True)
"""


def _guardian(*folders: str) -> tuple[int, int]:
    """Start the guardian of ``folders`` and the child to come: (the pipe's write end (close it last), its pid)."""
    read, write = os.pipe()
    try:
        guardian = subprocess.Popen(
            [sys.executable, "-S", "-c", _GUARDIAN, *folders],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env={},  # it needs nothing, and carries none of the run's variables
        )
    finally:
        os.close(read)
    return write, guardian.pid


SOCKET_ROOM = 60
"""The longest TMPDIR the child gets: a Unix socket's path (at most 107 bytes) is made under it (``multiprocessing``
shares a DataLoader worker's batches through ``TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX``; longer, the batch is lost and
the loader waits forever)."""


def _short_tmpdir(tmp: str) -> str:
    """The child's TMPDIR: check's temporary folder, or a short one beside the system's when its path is too long."""
    if len(tmp) <= SOCKET_ROOM:
        return tmp
    for root in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            return tempfile.mkdtemp(prefix="adc-", dir=root)
        except OSError:
            continue
    return tmp


def _tell(guardian: int, words: str) -> None:
    """Write to the guardian; a guardian already gone (killed by someone) must not end check without its report."""
    try:
        os.write(guardian, words.encode())
    except OSError:
        pass


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
    allow_writes: bool = False,
) -> dict[str, Any]:
    """Run the script's first ``steps`` steps on the CPU in a child process; its observation as a dict.

    The child's working directory is an empty scratch folder (its relative writes land there; the user's files
    are read through :class:`~anydevice.preflight.scratch.ScratchView`); its standard input is ``/dev/null``.
    Everything outside check's temporary folder is read-only for it and every process it starts
    (:mod:`anydevice.preflight.containment`: Landlock, else a mount namespace, else a copy; where none holds, an
    error unless ``allow_writes``). Everything it writes goes to a temporary folder removed afterwards; the child,
    its whole process group (DataLoader workers included) and what it started in a session of its own end with
    check, on any signal, ``kill -9`` included. ``compile_targets`` (``["tpu:v5e-8"]``): the child then compiles
    the step for each slice with the plugin's slice compiler.
    """
    from anydevice.preflight import containment
    from anydevice.preflight.runner_protocol import COMPILE_REQUEST, COMPILING

    tmp = tempfile.mkdtemp(prefix="anydevice-check-")
    short = _short_tmpdir(tmp)
    guardian, guardian_pid = _guardian(tmp, short)
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
            TMPDIR=short,
            ANYDEVICE_CHECK_RUN=tmp,  # the mark of every process of this run (check and its guardian end those left)
            ANYDEVICE_CACHE_DIR=str(Path(tmp) / "cache"),
            TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
            PYTHONDONTWRITEBYTECODE="1",  # no __pycache__ written next to the user's modules (existing caches are read)
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)  # as `python -m` from there
        shape = json.dumps(mesh) if mesh is not None else "-"

        def command(script_path: Path, cwd: Path) -> list[str]:
            runner = [sys.executable, "-m", "anydevice.preflight.runner", str(out), str(steps), str(world), shape, str(cwd)]
            return [*runner, str(script_path.resolve()), *args]

        plan = containment.plan(Path(tmp), script, Path.cwd(), also=[short])
        child = containment.start(
            plan,
            command,
            allow_writes,
            _dies_with(os.getpid()),
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        reaper = _Reaper(guardian_pid)  # from now on: the script's own start-up takes far longer than this
        _tell(guardian, f"{child.pid}\n")  # its process group (a new session: the group is its pid)
        reader = _Output(child)  # read as it comes: a helper the script left holding the pipe must not hold check
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if (Path(tmp) / COMPILING).exists():  # the CPU run ended; a compile was under way
                return _stopped_compile(out, Path(tmp) / COMPILING, f"did not finish within --timeout {timeout:g} s")
            raise AnyDeviceError(
                f"{script} did not reach {steps} step(s) on the CPU within {timeout:g} s.{_tail(reader.text())}",
                "Lower --steps, or raise --timeout.",
            ) from None
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)  # the child's group: loader workers and anything it started
            except (ProcessLookupError, PermissionError):
                pass
            child.wait()
            reaper.end(f"ANYDEVICE_CHECK_RUN={tmp}")  # what it started in a session of its own
            _tell(guardian, "done\n")
        output = reader.text(wait=5.0)
        refused = _refused(Path(tmp), output, plan)
        if (Path(tmp) / COMPILING).exists() and child.returncode and child.returncode < 0:
            why = "was killed (out of host memory?)" if child.returncode == -signal.SIGKILL else f"died ({child.returncode})"
            return _stopped_compile(out, Path(tmp) / COMPILING, f"{why} on this machine")
        if not out.exists():
            if refused:
                raise AnyDeviceError(_wrote(script, refused, plan) + _tail(output), _WRITES)
            raise AnyDeviceError(
                f"{script} ended on the CPU without a result (exit {child.returncode}).{_tail(output)}", _RUN_ON_CPU
            )
        data: dict[str, Any] = json.loads(out.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(short, ignore_errors=True)
        os.close(guardian)
    if "error" in data:
        if refused and data["error"] not in _HINTS:
            stopped = f" The script then stopped: {plan.user_path(str(data['error']))}"
            raise AnyDeviceError(_wrote(script, refused, plan) + stopped + _tail(output), _WRITES)
        if data["error"] == "compile_refused":  # the script ran well: the compiler's refusal and its own fix, no output
            raise AnyDeviceError(str(data["message"]))
        hint = _HINTS["stdin"] if data.get("stdin") else _HINTS.get(data["error"], _RUN_ON_CPU)
        raise AnyDeviceError(_explain(script, data) + _tail(output), hint)
    if data.get("run") is not None:
        data["run"].update(containment=plan.mechanism, refused=refused)
    return data


class _Output:
    """The child's output (stdout and stderr), read by a thread as it comes."""

    def __init__(self, child: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(child,), daemon=True)
        self.thread.start()

    def _read(self, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        try:
            for line in child.stdout:
                self.lines.append(line)
        except (OSError, ValueError):
            pass

    def text(self, wait: float = 0.5) -> str:
        """What was read, after waiting up to ``wait`` seconds for the end of the output."""
        self.thread.join(wait)
        return "".join(self.lines)


class _Reaper:
    """What the script starts in a session of its own ends with the check: this process adopts the script's orphans
    (a child subreaper, for the run) and ends them, with every process that carries the run's mark."""

    def __init__(self, guardian: int) -> None:
        self.me, self.guardian = os.getpid(), guardian
        self.since = _start_time(guardian) or 0  # the orphans to end started after the guardian (check's own children before)
        self.adopting = _subreaper(1)

    def end(self, mark: str) -> None:
        marker = mark.encode()
        for _ in range(50):
            found = [pid for pid in _pids() if self._ours(pid, marker)]
            if not found:
                break
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self._reap()
            time.sleep(0.02)
        self._reap()
        if self.adopting:
            _subreaper(0)

    def _ours(self, pid: int, marker: bytes) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    return True
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return False
        adopted = int(fields[1]) == self.me and pid != self.guardian and int(fields[19]) >= self.since
        return adopted and fields[0] != b"Z" and self.adopting

    def _reap(self) -> None:
        if not self.adopting:
            return
        for pid in _pids():
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if int(fields[1]) == self.me and fields[0] == b"Z" and int(fields[19]) >= self.since:
                    os.waitpid(pid, os.WNOHANG)
            except (OSError, IndexError, ChildProcessError):
                pass


def _pids() -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid()]
    except OSError:
        return []


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _subreaper(on: int) -> bool:
    """Adopt (1) or stop adopting (0) this process's orphaned descendants; False where the kernel cannot (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    from anydevice.cli.lifeline import PR_SET_CHILD_SUBREAPER

    return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, on, 0, 0, 0)) == 0


_DENIED = re.compile(r"(Permission denied|Read-only file system|Operation not permitted)")
_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"|cannot create (/[^:]+):|(/[^\s:]+)")


def _refused(tmp: Path, output: str, plan: Any) -> list[str]:
    """The writes the script tried outside check's scratch folder, refused, each ``file:line tried to VERB PATH``
    (the ``file:line`` of the user's code; a command's refusal read from its output)."""
    from anydevice.preflight.scratch import REFUSED
    from anydevice.runtime.untrusted import clean

    records: list[dict[str, Any]] = []  # written by the child, in the order of the script's calls (the script could write it too)
    try:
        with open(tmp / REFUSED, encoding="utf-8", errors="replace") as log:
            for line in log:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append({k: str(v) for k, v in record.items() if v is not None})
    except OSError:
        pass
    runs = [i for i, r in enumerate(records) if r.get("op") == "run"]
    denied: dict[int, list[str]] = {}  # a command's refusals, read from the output, under the record of the command
    for text in output.splitlines():
        if not _DENIED.search(text) or not runs:
            continue
        paths = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]
        path = next((p for p in paths if p.startswith("/")), paths[0] if paths else "")
        if any(_under(path, r.get("path", "")) for r in records if r.get("op") != "run"):
            continue  # the script's own report of a write already noted (an exception it printed)
        ran = max(runs, key=lambda i: max((len(p) for p in _ancestors(path) if p in records[i].get("command", "")), default=0))
        denied.setdefault(ran, []).append(text.strip()[:200])
    found: list[str] = []
    for i, r in enumerate(records):
        where = f"{_where(r['line'])} " if r.get("line") else ""
        if r.get("op") != "run":
            found.append(f"{where}tried to {r.get('op')} {r.get('path')}")
        for said in denied.get(i, []):
            found.append(f"{where}ran `{_short(r.get('command', ''))}`, whose write was refused ({said})")
    return [clean(plan.user_path(text), 500) for text in dict.fromkeys(found)][:20]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _where(line: Any) -> str:
    """``file:line`` relative to the working directory when the file is under it (``train.py:3``)."""
    text = str(line)
    cwd = os.getcwd().rstrip(os.sep) + os.sep
    return text[len(cwd) :] if text.startswith(cwd) else text


def _ancestors(path: str) -> list[str]:
    """``path`` and its folders up to the second level (a command names the folder it removes, not each file)."""
    parts = path.rstrip("/").split("/")
    return ["/".join(parts[:n]) for n in range(len(parts), 2, -1)]


def _short(command: str) -> str:
    return command if len(command) <= 120 else command[:117] + "..."


def _wrote(script: Path, refused: list[str], plan: Any) -> str:
    more = f"; {len(refused) - 1} more write(s) refused" if len(refused) > 1 else ""
    return (
        f"{refused[0]}: check never changes your files; this is a script that writes at start-up{more} ({held(plan.mechanism)})."
    )


def held(mechanism: str) -> str:
    """What kept the script from the user's files, in words (the mechanism's name first)."""
    from anydevice.preflight.containment import HOW

    return f"{mechanism}: {HOW[mechanism]}" if mechanism in HOW else mechanism


_WRITES = (
    "check runs the script's first steps with everything outside its scratch folder read-only (docs/check.md): "
    "writes by relative path, through __file__ or into your folders go to scratch; removing, renaming or changing "
    "your files (and any write elsewhere, by the shell or a subprocess) is refused. Make that write conditional, "
    "or move it after the first steps; `python SCRIPT` itself is unaffected."
)


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
        if obs.run.containment:
            lines.append(f"contained by {held(obs.run.containment)}")
        for refusal in obs.run.refused[:5]:
            lines.append(f"refused (your files are as they were): {refusal}")
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
    observed = observe(path, args, steps, world, timeout, mesh, compile_targets, allow_writes=options["--allow-writes"])
    observation = Observation.model_validate(observed)
    result = report(observation, targets, script=script)
    if options["--json"]:
        print(result.model_dump_json(indent=2))
    else:
        print(render(result))
    return 0 if result.ok else 1
