"""The distributed checks of one target: world size and mesh against its topology, collectives against its backend.

- **world size** (``-n``): a whole slice on some chip of the target (``CheckFacts.world_sizes``, TorchTPU).
- **mesh** (``--mesh dp=2,tp=4``): the degrees multiply to the world size (one ``-1`` takes what is left,
  which must divide evenly); on a target with whole slices, the tensor-parallel degree (axis ``tp``, else
  the last axis) divides a whole slice, so no tensor-parallel group straddles hosts.
- **collectives** (the ``c10d::`` ops of the first step): a reduction the target's process group lacks
  (``CheckFacts.lacking_reduce_ops``, the collectives shim's set) fails there; ``ad.distributed`` emulates
  ``AVG`` (sum, then divide), so an ``AVG`` called through it is fine.
"""

from __future__ import annotations

import math

from anydevice.contract.check_facts import CheckFacts
from anydevice.preflight.schema import Finding, Observation, Verdict

MESH_FIX = "choose mesh degrees whose product is the world size (-n), e.g. dp=-1 with a tp that divides it"


def _slices(facts: CheckFacts) -> str:
    return "; ".join(f"{chip} {{{', '.join(map(str, sizes))}}}" for chip, sizes in facts.world_sizes.items())


def world_findings(target: str, facts: CheckFacts, obs: Observation, findings: list[Finding]) -> list[Verdict]:
    """``-n`` against the target's whole slices."""
    n = obs.world_size
    if not facts.world_sizes:
        return []
    fits = [chip for chip, sizes in facts.world_sizes.items() if n in sizes]
    allowed = _slices(facts)
    if not fits:
        findings.append(
            Finding(
                check="distributed",
                severity="error",
                message=f"{n} process(es) is not a whole {target} slice on any "
                f"chip (whole slices: {allowed}); a partial slice never passes the start barrier",
                fix=f"launch a whole slice: -n in {allowed}",
            )
        )
        return ["will not launch"]
    if n > 1 and len(fits) < len(facts.world_sizes):
        findings.append(
            Finding(check="distributed", severity="info", message=f"{n} process(es) is a whole slice on {', '.join(fits)} only")
        )
    return []


def resolve_mesh(mesh: dict[str, int], world: int) -> tuple[dict[str, int], str | None]:
    """The mesh degrees with ``-1`` resolved against ``world``, and what is wrong with them (None: nothing)."""
    free = [axis for axis, size in mesh.items() if size == -1]
    fixed = math.prod(size for size in mesh.values() if size != -1)
    shown = ", ".join(f"{axis}={size}" for axis, size in mesh.items())
    if len(free) > 1 or any(size == 0 or size < -1 for size in mesh.values()):
        return mesh, f"mesh {shown}: degrees must be positive, with at most one -1"
    if free:
        if world % fixed:
            return mesh, f"mesh {shown}: {fixed} does not divide the world of {world} process(es), so {free[0]}=-1 has no size"
        mesh = {axis: world // fixed if size == -1 else size for axis, size in mesh.items()}
    elif fixed != world:
        return mesh, f"mesh {shown} needs {fixed} process(es), but the world has {world}"
    return mesh, None


def mesh_findings(target: str, facts: CheckFacts, obs: Observation, findings: list[Finding]) -> list[Verdict]:
    """The mesh against the world size and, where the target has whole slices, the tensor-parallel degree against them."""
    if obs.mesh is None:
        return []
    mesh, problem = resolve_mesh(obs.mesh, obs.world_size)
    if problem:
        findings.append(Finding(check="distributed", severity="error", message=problem, line=obs.mesh_line, fix=MESH_FIX))
        return ["will not launch"]
    axis = "tp" if "tp" in mesh else list(mesh)[-1]
    tp = mesh[axis]
    sizes = sorted({s for chip_sizes in facts.world_sizes.values() for s in chip_sizes})
    if sizes and not any(s % tp == 0 for s in sizes):
        findings.append(
            Finding(
                check="distributed",
                severity="error",
                message=f"mesh axis {axis}={tp} divides no whole {target} slice ({_slices(facts)}): "
                "its tensor-parallel groups would straddle slices",
                line=obs.mesh_line,
                fix=f"use a {axis} degree that divides a slice ({', '.join(map(str, sizes))})",
            )
        )
        return ["will not launch"]
    return []


def collective_findings(target: str, facts: CheckFacts, obs: Observation, findings: list[Finding]) -> list[Verdict]:
    """Each reduction the step ran against the reduce ops the target's process group lacks."""
    lacking = facts.lacking_reduce_ops
    reducing = [c for c in obs.collectives if c.reduce_op is not None]
    if not reducing:
        return []
    backend = f"{target}'s '{facts.dist_backend}' process group" if facts.dist_backend else f"{target}'s process group"
    if lacking is None:
        ops = ", ".join(sorted({f"{c.op} {c.reduce_op}" for c in reducing}))
        findings.append(
            Finding(
                check="distributed",
                severity="info",
                message=f"collectives not checked: {target}'s plugin declares no reduce ops its process group lacks ({ops})",
            )
        )
        return []
    verdicts: list[Verdict] = []
    for c in reducing:
        if c.reduce_op not in lacking:
            continue
        if c.reduce_op == "AVG" and c.via_anydevice:
            message = f"{c.op} with ReduceOp.AVG through ad.distributed: {backend} lacks AVG; ad.distributed sums, then divides"
            findings.append(Finding(check="distributed", severity="info", message=message, line=c.line))
            continue
        kept = sorted({"SUM", "AVG", "PRODUCT", "MIN", "MAX"} - lacking)
        findings.append(
            Finding(
                check="distributed",
                severity="error",
                message=f"{c.op} with ReduceOp.{c.reduce_op}: {backend} has no {c.reduce_op} reduction",
                line=c.line,
                fix=f"use ad.distributed.all_reduce(t, '{c.reduce_op.lower()}') (it emulates AVG) or one of {', '.join(kept)}",
            )
        )
        verdicts.append("will not launch")
    return verdicts
