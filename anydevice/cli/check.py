"""``anydevice check SCRIPT [ARGS...] --target tpu,neuron,xla [--json] [--steps N] [-n N] [--mesh dp=2,tp=4]``: will it run there?

Runs the script's first N steps on the CPU in a child process (:mod:`anydevice.preflight.runner`, with
cuda-compat on so CUDA-written scripts run too), then prints a report per target: a static analysis, not
a run. check's own options may come before or after SCRIPT; a script argument with the same name as one
of them goes after ``--``. Exit status: 0 every target "runs", 1 otherwise, 2 usage errors.
"""

from __future__ import annotations

import json
import math
import os
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


def observe(
    script: Path, args: list[str], steps: int, world: int, timeout: float, mesh: dict[str, int] | None = None
) -> dict[str, Any]:
    """Run the script's first ``steps`` steps on the CPU in a child process; its observation as a dict.

    Everything it writes to caches or temporary files goes to a directory removed afterwards, and its
    whole process group (DataLoader workers included) is ended.
    """
    with tempfile.TemporaryDirectory(prefix="anydevice-check-") as tmp:
        out = Path(tmp) / "observation.json"
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        env.update(
            ANYDEVICE="cpu",
            ANYDEVICE_CUDA_COMPAT="1",
            ANYDEVICE_QUIET="1",
            TMPDIR=tmp,
            ANYDEVICE_CACHE_DIR=str(Path(tmp) / "cache"),
            TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
        )
        shape = json.dumps(mesh) if mesh is not None else "-"
        command = [sys.executable, "-m", "anydevice.preflight.runner", str(out), str(steps), str(world), shape]
        command += [str(script), *args]
        child = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            _, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AnyDeviceError(
                f"{script} did not reach {steps} step(s) on the CPU within {timeout:g} s.", "Lower --steps, or raise --timeout."
            ) from None
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)  # the child's group: loader workers and anything it started
            except (ProcessLookupError, PermissionError):
                pass
            child.wait()
        if not out.exists():
            tail = "\n".join(stderr.strip().splitlines()[-8:])
            raise AnyDeviceError(f"{script} ended on the CPU without a result (exit {child.returncode}):\n{tail}", _RUN_ON_CPU)
        data: dict[str, Any] = json.loads(out.read_text())
    if "error" in data:
        raise AnyDeviceError(_explain(script, data), _HINTS.get(data["error"], _RUN_ON_CPU))
    return data


_RUN_ON_CPU = "check runs the script's first steps on the CPU: make `ANYDEVICE=cpu python SCRIPT ...` run first."
_HINTS = {
    "no_loader": "check samples the script's own DataLoader for input shapes: feed the model from a torch.utils.data."
    "DataLoader, or call ad.check(model, example_inputs, target=...) from Python.",
    "no_model": "check needs a module with trainable parameters called on a loader batch (model(batch)); or use ad.check(...).",
}


def _explain(script: Path, data: dict[str, Any]) -> str:
    if data["error"] == "no_loader":
        return f"{script} never iterated a torch.utils.data.DataLoader, so its input shapes cannot be sampled."
    if data["error"] == "no_model":
        return f"{script} iterated a DataLoader but never called a module with trainable parameters on the batches."
    where = f" at {data['line']}" if data.get("line") else ""
    return f"{script} failed on the CPU before its first step{where}: {data['error']}"


def render(report: Any) -> str:
    """The human report: one block per target, findings with lines and fixes, worst first."""
    obs = report.observation
    mem = obs.memory
    lines = [
        f"anydevice check: static analysis, not a run ({report.script or 'model'}: {obs.steps} step(s) on the CPU; "
        + ", ".join(f"{k} {v}" for k, v in obs.versions.items())
        + ")",
        f"seen: {len(obs.signatures)} input signature(s) in {sum(s.batches for s in obs.signatures)} batch(es); "
        f"{obs.capture.graph_count if obs.capture.graph_count is not None else '?'} graph(s), "
        f"{obs.capture.graph_break_count if obs.capture.graph_break_count is not None else '?'} graph break(s); "
        f"{len(obs.ops)} ATen ops ({len(obs.core_aten)} core ATen in the forward); dtypes {', '.join(obs.dtypes) or 'none'}"
        + (f"; {mem.total / 2**20:.1f} MiB per replica" if mem else "")
        + (f"; {len(obs.collectives)} collective(s)" if obs.collectives else "")
        + (f"; mesh {', '.join(f'{a}={n}' for a, n in obs.mesh.items())} over {obs.world_size}" if obs.mesh else ""),
    ]
    from anydevice.preflight.text import findings_block

    for t in report.targets:
        lines += ["", f"{t.target}: {t.summary.upper()}", *findings_block(t.findings, t.fixes)]
        lines.append(f"  sources: {'; '.join(t.sources)}")
        statuses = ("native", "cpu_fallback", "unsupported", "unknown")
        marks = {status: sum(v.status == status for v in t.ops) for status in statuses}
        lines.append(f"  ops: {len(t.ops)} marked: " + ", ".join(f"{n} {status}" for status, n in marks.items() if n))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``anydevice check``: 0 when every target runs, 1 otherwise, 2 on usage errors."""
    if argv[:1] in (["-h"], ["--help"]) or not argv:
        print(__doc__.strip().split("\n\n")[0] + "\n\n" + USAGE)
        return 0 if argv else 2
    from anydevice.preflight import report, targets_of
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
    observation = Observation.model_validate(observe(path, args, steps, world, timeout, mesh))
    result = report(observation, targets, script=script)
    if options["--json"]:
        print(result.model_dump_json(indent=2))
    else:
        print(render(result))
    return 0 if result.ok else 1
