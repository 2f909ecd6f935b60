"""``anydevice launch``'s specs: a SkyPilot task, a Kubernetes JobSet or a SLURM batch script for one target.

    from anydevice.launch_specs import Plan, parse_target, write
    plan = Plan(parse_target("tpu:v5e-16"), "train.py", ("--steps", "100"), name="train")
    print(write("jobset", plan))

Each engine's module (:mod:`.skypilot`, :mod:`.jobset`, :mod:`.slurm`) turns a :class:`Plan` into its text; the
hosts, chips and topology come from the chips catalogue (:mod:`.target`), the start command from :class:`Plan`
(``anydevice run`` with the engine's variables), and :mod:`.rehearse` runs that command here, once per host.
Pure text: nothing here needs the device, the engine or a YAML library.
"""

from __future__ import annotations

from anydevice.errors import UsageError
from anydevice.launch_specs import jobset, skypilot, slurm
from anydevice.launch_specs.plan import DEFAULT_PORT, Plan
from anydevice.launch_specs.target import Target, parse_target

ENGINES = ("skypilot", "jobset", "slurm")

__all__ = ["DEFAULT_PORT", "ENGINES", "Plan", "Target", "comment", "header", "parse_target", "write"]


def header(plan: Plan, notes: tuple[str, ...] = ()) -> str:
    """The comment lines every spec starts with: what runs where, and where the chip's facts come from."""
    from anydevice.release import VERSION

    t = plan.target
    shape = f"{t.hosts} host(s)" + (f" x {t.chips_per_host} {t.model} chip(s)" if t.model else "")
    if t.topology:
        shape += f", topology {t.topology}"
    lines = [
        f"anydevice launch {VERSION}: {plan.script} on {t.text} ({shape}; anydevice run -n {t.processes} on each host)",
        f"chip facts: {t.source}" if t.model else "no chip: a cpu target (a rehearsal)",
        *notes,
    ]
    return "".join(f"# {comment(line)}\n" for line in lines)


def comment(text: str) -> str:
    """``text`` as the rest of one comment line: a line break or other control character in it (a script path, a check's
    reason) is written escaped, so nothing after it can become a YAML key or a shell command."""
    return text if text.isprintable() else "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def write(engine: str, plan: Plan, notes: tuple[str, ...] = ()) -> str:
    """The spec for ``engine`` (``skypilot``, ``jobset`` or ``slurm``) as text."""
    head = header(plan, notes)
    if engine == "skypilot":
        return skypilot.emit(plan, head)
    if engine == "jobset":
        return jobset.emit(plan, head)
    if engine == "slurm":
        return slurm.script(plan, head)
    raise UsageError(f"--emit {engine!r} is not an engine anydevice writes for.", f"Choose one of: {', '.join(ENGINES)}.")
