"""The matrix as Markdown: the summary grid, versions, tables per group, failures with their sources, runs, diffs.

Every text taken from a result file goes through :func:`md`: HTML is escaped (a Markdown renderer
that passes HTML through gets text, never a tag), Markdown syntax and ``|`` are escaped (a table
row never splits), and line breaks become spaces. No result text goes into a code span.
"""

from __future__ import annotations

import re

from anydevice.compat_matrix import claims, merge
from anydevice.compat_matrix.claims import origin
from anydevice.compat_matrix.merge import DISAGREE, Cell, Column, Diff, Matrix, Tally, column_evidence, ran_pair, tally
from anydevice.compat_matrix.runner import probe_command
from anydevice.compat_matrix.schema import CLAIM_MISMATCH_SYMBOL, DISAGREE_SYMBOL, LABEL, SYMBOL, WORKING, Status, shown
from anydevice.compat_matrix.versions_table import lane_times, plugin_versions

_SPECIAL = re.compile(r"([\\`*_\[\]|#!~])")


def md(text: object) -> str:
    """Escape text for a Markdown table cell: no HTML, no markup, no line breaks."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _SPECIAL.sub(r"\\\1", s)
    return " ".join(s.split())


def _label(key: str) -> str:
    if key == DISAGREE:
        return f"{DISAGREE_SYMBOL} disagree"
    status = Status(key)
    return f"{SYMBOL[status]} " + ("fake (simulated)" if status is Status.FAKE else LABEL[status])


def _counts(t: Tally) -> str:
    return ", ".join(f"{_label(key)} {n}" for key, n in t.ordered())


def _cell_text(cell: Cell) -> str:
    status = cell.status
    if status is None:
        text = f"{DISAGREE_SYMBOL} disagree (" + ", ".join(f"{LABEL[s]} ×{n}" for s, n in cell.counts()) + ")"
    else:
        text = f"{SYMBOL[status]} {LABEL[status]}" + (f" at {cell.stages}" if cell.stages else "") + cell.skipped_beside
    if cell.claim:
        text += f" {CLAIM_MISMATCH_SYMBOL} {cell.claim}" if cell.contradicts else f" ({cell.claim})"
    return text + (f", {', '.join(cell.origins)}" if cell.origins else "")


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
    out += _summary(matrix)
    out += _versions(matrix)
    out += ["## Legend", ""]
    out += [f"- {SYMBOL[s]} {LABEL[s]}" for s in Status] + [
        f"- {DISAGREE_SYMBOL} disagree: runs in one column saw different statuses",
        f"- {CLAIM_MISMATCH_SYMBOL} claimed …: the probe contradicts what the plugin declares "
        "(claimed unsupported but it works, or claimed supported but it fails)",
        "- (declared unsupported): the plugin declares it does not support this; a fail or skip is what it expects",
        "- from the device / plugin / vendor package / simulation / harness: where a failure comes from. "
        "A simulation's failure is a feature the simulated vendor module lacks: it tests the plugin's code "
        "paths and says nothing about the real hardware",
        f"- · {merge.NOT_APPLICABLE}: {merge.EXPORT_NOTE}",
        "",
    ]
    if matrix.columns:
        out += ["## Columns", ""]
        for column in matrix.columns:
            runs = ", ".join(f"{md(r.source)} ({r.date})" for r in column.runs)
            out.append(
                f"- **{column.id}**: {md(column.label)}; {md(column.versions)}; "
                f"{md(_counts(tally(matrix, column)))}; runs: {runs}"
            )
        out.append("")
    for shim in matrix.shims:
        rows = [r for r in matrix.rows if r.shim == shim]
        out += [f"## {md(shim)}", ""]
        out.append("| probe | " + " | ".join(f"{c.id}: {md(c.label)}" for c in matrix.columns) + " |")
        out.append("|---|" + "---|" * len(matrix.columns))
        for row in rows:
            cells = [
                md(_cell_text(matrix.cell(row.probe, c)) if merge.shows(matrix, row, c) else f"· {merge.NOT_APPLICABLE}")
                for c in matrix.columns
            ]
            out.append(f"| {md(row.probe)} | " + " | ".join(cells) + " |")
        out.append("")
    out += _claims(matrix)
    out += _problems(matrix)
    out += _runs(matrix)
    out += _diffs(matrix)
    return "\n".join(out).rstrip() + "\n"


def _summary(matrix: Matrix) -> list[str]:
    if not matrix.columns:
        return []
    groups = matrix.shims
    lines = [
        "## Summary",
        "",
        "One row per device column, one cell per probe group: the worst status, then how many probes work.",
        "",
        "| column | " + " | ".join(md(g) for g in groups) + " |",
        "|---|" + "---|" * len(groups),
    ]
    for column in matrix.columns:
        overall = tally(matrix, column)
        cells = []
        for group in groups:
            t = tally(matrix, column, group)
            cells.append(md(f"{_label(t.worst)}: {t.working}/{t.total} work" if t.total else merge.NOT_APPLICABLE))
        head = md(
            f"{column.id}: {column.label} ({overall.working}/{overall.total} work; evidence: {column_evidence(column).label()})"
        )
        lines.append(f"| {head} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _versions(matrix: Matrix) -> list[str]:
    rows = plugin_versions(matrix, lanes=matrix.lanes)
    minors = [c.torch for c in rows[0].cells] if rows else []
    lines = [
        "## Versions",
        "",
        "Per torch version: **tested** (a test lane or a result file ran it), declared (claimed, nothing ran it here), "
        "none (no vendor release for that torch).",
        "",
        "| plugin | vendor package | supported pairs | ran here | " + " | ".join(f"torch {m}" for m in minors) + " |",
        "|---|---|---|---|" + "---|" * len(minors),
    ]
    for pv in rows:
        ran = "; ".join(f"{c.id}: {ran_pair(c)}" for c in pv.columns) or "not run here: no result file yet"
        cells = " | ".join("**tested**" if c.status == "tested" else c.status for c in pv.cells)
        lines.append(f"| {md(pv.plugin)} | {md(pv.vendor_package or '-')} | {md(pv.supported)} | {md(ran)} | {cells} |")
    times = lane_times(matrix.lanes)
    if times:
        lines += ["", "The test lanes of `scripts/test` (their records, `compat_matrix/lanes/`):", ""]
        lines += [f"- {md(line)}" for line in times]
    return [*lines, ""]


def _notices(matrix: Matrix) -> list[str]:
    lines = [f"- Result file not used: {md(p)}" for p in matrix.problems]
    lines += [f"- Result file cut to fit the page: {md(c)}" for c in matrix.cuts]
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
        observed = shown(r)
        verdict = f"{CLAIM_MISMATCH_SYMBOL} {f.contradiction}" if f.contradiction else "agrees"
        claim = claims.describe(r.expected) if r.expected else ""
        where = f"{md(r.probe)} on {f.column.id} ({md(f.loaded.source)})"
        return f"- {where}: {verdict}; observed {observed}; the plugin claims {md(claim)}"

    found = claims.findings(matrix)
    if not found:
        return []
    contradicted = [item(f) for f in found if f.contradiction]
    declared = [item(f) for f in found if not f.contradiction]
    lines = [
        "## Claimed vs observed",
        "",
        "Every probe a plugin does not declare unsupported (`DeviceSpec.unsupported`) is claimed supported.",
        "",
    ]
    if contradicted:
        lines += [f"### Contradicting the plugin ({len(contradicted)})", "", *contradicted, ""]
    if declared:
        lines += [f"### Declared unsupported ({len(declared)})", "", *declared, ""]
    return lines


def _problems(matrix: Matrix) -> list[str]:
    lines = []
    for row in matrix.rows:
        for column in matrix.columns:
            for loaded, result in matrix.cell(row.probe, column).entries:
                if result.status in WORKING or result.status in (Status.SKIP, Status.UNTESTED):
                    continue
                command = probe_command(loaded.run, row.probe)
                found = origin(loaded.run, result)
                source = f" Comes from the {found.source.value}: {md(found.why)}." if found else ""
                lines.append(
                    f"- {md(row.probe)} on {column.id} ({md(loaded.source)}): {shown(result)}"
                    + f": {md(result.reason or result.message or '')}.{source} Reproduce: {md(command)}"
                )
    return ["## Failures, partials and harness errors", "", *lines, ""] if lines else []


def _column_of(matrix: Matrix, source: str) -> Column | None:
    return next((c for c in matrix.columns if any(r.source == source for r in c.runs)), None)


def _runs(matrix: Matrix) -> list[str]:
    if not matrix.runs:
        return []
    lines = [
        "## Runs",
        "",
        "| file | column | device | started (UTC) | health | anydevice | torch | vendor | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for loaded in matrix.runs:
        run = loaded.run
        vendor = f"{run.plugin.vendor_package} {run.plugin.vendor_version or '?'}" if run.plugin.vendor_package else "-"
        column = _column_of(matrix, loaded.source)
        lines.append(
            f"| {md(loaded.source)} | {column.id if column else '-'} | {md(loaded.device)} | {loaded.date} | {loaded.health} "
            f"| {md(run.anydevice.version)} | {md(run.env.torch or '?')} | {md(vendor)} | {md(run.invocation.command)} |"
        )
    return [*lines, ""]


def _diffs(matrix: Matrix) -> list[str]:
    if not matrix.diffs:
        return []  # no device has two runs: no section
    lines = ["## Changes between consecutive runs of a device", ""]
    for diff in matrix.diffs:
        lines += _diff(diff)
    return lines


def _diff(diff: Diff) -> list[str]:
    lines = [f"### {md(diff.device)}: {diff.old.date} → {diff.new.date}", ""]
    for title, changes in (("Newly broken", diff.broken), ("Newly working", diff.fixed), ("Other changes", diff.changed)):
        listed = ", ".join(f"{md(c.probe)} ({LABEL[c.old]} → {LABEL[c.new]})" for c in changes) or "none"
        lines.append(f"- {title} ({len(changes)}): {listed}")
    return [*lines, ""]
