"""The matrix as Markdown: tables per shim, the failures with their reasons, runs and diffs."""

from __future__ import annotations

import re

from anydevice.compat_matrix import claims
from anydevice.compat_matrix.merge import Cell, Diff, Matrix
from anydevice.compat_matrix.runner import reproduce_command
from anydevice.compat_matrix.schema import Status
from anydevice.compat_matrix.symbols import CLAIM_MISMATCH_SYMBOL, DISAGREE_SYMBOL, LABEL, SYMBOL, WORKING

_SPECIAL = re.compile(r"([\\`*_\[\]|#!~])")


def md(text: object) -> str:
    """Escape text for a Markdown table cell: no HTML, no markup, no line breaks."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _SPECIAL.sub(r"\\\1", s)
    return " ".join(s.split())


def _cell_text(cell: Cell) -> str:
    status = cell.status
    if status is None:
        text = f"{DISAGREE_SYMBOL} disagree (" + ", ".join(f"{LABEL[s]} ×{n}" for s, n in cell.counts()) + ")"
    else:
        text = f"{SYMBOL[status]} {LABEL[status]}"
        stages = sorted({r.failure_stage.value for _, r in cell.entries if r.failure_stage is not None})
        text += f" at {'/'.join(stages)}" if stages else ""
    return text + _claim_note(cell)


def _claim_note(cell: Cell) -> str:
    contradicted = [r for _, r in cell.entries if claims.mismatch(r)]
    if contradicted:
        return f" {CLAIM_MISMATCH_SYMBOL} {claims.short(contradicted[0])}"
    notes = sorted({n for _, r in cell.entries if (n := claims.short(r))})
    return f" ({notes[0]})" if notes else ""


def render_markdown(matrix: Matrix) -> str:
    """The whole Markdown page."""
    out = ["# anydevice compatibility matrix", ""]
    dates = sorted(r.date for r in matrix.runs)
    span = f", results dated {dates[0]} to {dates[-1]}" if dates else ""
    out += [
        f"Generated only from probe runs: {len(matrix.runs)} run(s) in {len(matrix.columns)} column(s), "
        f"{len(matrix.rows)} probes{span}. The HTML page (index.html) has each cell's evidence.",
        "",
    ]
    out += _notices(matrix)
    out += ["## Legend", ""]
    out += [f"- {SYMBOL[s]} {LABEL[s]}" for s in Status] + [
        f"- {DISAGREE_SYMBOL} disagree: runs in one column saw different statuses",
        f"- {CLAIM_MISMATCH_SYMBOL} claimed …: the probe contradicts what the plugin declares "
        "(claimed unsupported but it works, or claimed supported but it fails)",
        "- (declared unsupported): the plugin declares it does not support this; a fail or skip is what it expects",
        "",
    ]
    out += ["## Columns", ""]
    for column in matrix.columns:
        runs = ", ".join(f"{md(r.source)} ({r.date})" for r in column.runs)
        out.append(f"- **{column.id}**: {md(column.label)}; {md(column.versions)}; runs: {runs}")
    out.append("")
    for shim in matrix.shims:
        rows = [r for r in matrix.rows if r.shim == shim]
        out += [f"## {md(shim)}", ""]
        out.append("| probe | " + " | ".join(f"{c.id}: {md(c.label)}" for c in matrix.columns) + " |")
        out.append("|---|" + "---|" * len(matrix.columns))
        for row in rows:
            cells = [md(_cell_text(matrix.cell(row.probe, c))) for c in matrix.columns]
            out.append(f"| `{row.probe}` | " + " | ".join(cells) + " |")
        out.append("")
    out += _claims(matrix)
    out += _problems(matrix)
    out += _runs(matrix)
    out += _diffs(matrix)
    return "\n".join(out).rstrip() + "\n"


def _notices(matrix: Matrix) -> list[str]:
    lines = [f"- Result file not used: {md(p)}" for p in matrix.problems]
    for loaded in matrix.runs:
        health = loaded.run.health
        if not health.device_available:
            lines.append(
                f"- Run {md(loaded.source)}: the device was not available; its probes were skipped: {md(health.note or '')}"
            )
        elif not health.sanity_passed:
            lines.append(
                f"- Run {md(loaded.source)} is UNHEALTHY (sanity probe failed); its other probes are untested. "
                + md(health.note or "")
            )
    return (["## Notices", "", *lines, ""]) if lines else []


def _claims(matrix: Matrix) -> list[str]:
    def item(f: claims.Finding) -> str:
        r = f.result
        observed = f"{SYMBOL[r.status]} {LABEL[r.status]}" + (f" at {r.failure_stage.value}" if r.failure_stage else "")
        verdict = f"{CLAIM_MISMATCH_SYMBOL} {f.contradiction}" if f.contradiction else "agrees"
        claim = claims.describe(r.expected) if r.expected else ""
        where = f"`{r.probe}` on {f.column.id} ({md(f.loaded.source)})"
        return f"- {where}: {verdict}; observed {observed}; the plugin claims {md(claim)}"

    found = claims.findings(matrix)
    contradicted = [item(f) for f in found if f.contradiction]
    declared = [item(f) for f in found if not f.contradiction]
    return [
        "## Claimed vs observed",
        "",
        "Every probe a plugin does not declare unsupported (`DeviceSpec.unsupported`) is claimed supported.",
        "",
        f"### Contradicting the plugin ({len(contradicted)})",
        "",
        *(contradicted or ["None."]),
        "",
        f"### Declared unsupported ({len(declared)})",
        "",
        *(declared or ["None."]),
        "",
    ]


def _problems(matrix: Matrix) -> list[str]:
    lines = []
    for row in matrix.rows:
        for column in matrix.columns:
            for loaded, result in matrix.cell(row.probe, column).entries:
                if result.status in WORKING or result.status in (Status.SKIP, Status.UNTESTED):
                    continue
                command = reproduce_command(loaded.run.invocation.ANYDEVICE or loaded.run.plugin.name, ["--only", row.probe])
                lines.append(
                    f"- `{row.probe}` on {column.id} ({md(loaded.source)}): {SYMBOL[result.status]} {LABEL[result.status]}"
                    + (f" at {result.failure_stage.value}" if result.failure_stage else "")
                    + f": {md(result.reason or result.message or '')}. Reproduce: `{command.replace('`', '')}`"
                )
    return ["## Failures, partials and harness errors", "", *(lines or ["None."]), ""]


def _runs(matrix: Matrix) -> list[str]:
    lines = [
        "## Runs",
        "",
        "| file | device | started (UTC) | health | anydevice | torch | vendor | command |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for loaded in matrix.runs:
        run = loaded.run
        health = "healthy" if loaded.healthy else ("device not available" if not run.health.device_available else "UNHEALTHY")
        vendor = f"{run.plugin.vendor_package} {run.plugin.vendor_version or '?'}" if run.plugin.vendor_package else "-"
        lines.append(
            f"| {md(loaded.source)} | {md(loaded.device)} | {loaded.date} | {health} | {md(run.anydevice.version)} "
            f"| {md(run.env.torch or '?')} | {md(vendor)} | {md(run.invocation.command)} |"
        )
    return [*lines, ""]


def _diffs(matrix: Matrix) -> list[str]:
    lines = ["## Changes between consecutive runs of a device", ""]
    if not matrix.diffs:
        return [*lines, "No device has two runs yet.", ""]
    for diff in matrix.diffs:
        lines += _diff(diff)
    return lines


def _diff(diff: Diff) -> list[str]:
    lines = [f"### {md(diff.device)}: {diff.old.date} → {diff.new.date}", ""]
    for title, changes in (("Newly broken", diff.broken), ("Newly working", diff.fixed), ("Other changes", diff.changed)):
        listed = ", ".join(f"`{c.probe}` ({LABEL[c.old]} → {LABEL[c.new]})" for c in changes) or "none"
        lines.append(f"- {title} ({len(changes)}): {listed}")
    return [*lines, ""]
