"""The matrix as one self-contained HTML page: inline CSS and JS, no network, every text escaped."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from anydevice.compat_matrix import claims
from anydevice.compat_matrix.merge import Cell, Column, Diff, LoadedRun, Matrix
from anydevice.compat_matrix.origin import Source, origin
from anydevice.compat_matrix.runner import reproduce_command
from anydevice.compat_matrix.schema import ProbeResult, Status
from anydevice.compat_matrix.summary import DISAGREE, Tally, cell_key, tally
from anydevice.compat_matrix.symbols import CLAIM_MISMATCH_SYMBOL, DISAGREE_SYMBOL, LABEL, SIMULATED, SYMBOL
from anydevice.compat_matrix.versions_table import plugin_versions, ran_pair

LOG_EXCERPT = 1500

MEANING = {
    Status.PASS: "ran on the device and matched the CPU reference",
    Status.FALLBACK: "correct, but some ops ran on the CPU instead of the device",
    Status.PARTIAL: "works only in part (the evidence says which part)",
    Status.FAIL: "failed; the evidence names the stage: import, place, compile, execute or compare",
    Status.SKIP: "does not apply here (the reason says why)",
    Status.HARNESS_ERROR: "the probe harness or the anydevice API was at fault, not the device",
    Status.UNTESTED: "nobody probed this (or the run was gated by a failed sanity probe)",
    Status.FAKE: "passed against a simulated vendor module, not real hardware",
}


def e(text: object) -> str:
    """Escape for HTML text and attribute values."""
    return escape(str(text), quote=True)


def render_html(matrix: Matrix) -> str:
    """The whole page."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>anydevice compatibility matrix</title>",
        f"<style>{_CSS}</style></head><body>",
        _header(matrix),
        _notices(matrix),
        _summary(matrix),
        _versions(matrix),
        _legend(),
        _table(matrix),
        _claims_section(matrix),
        _runs(matrix),
        _diff_section(matrix),
        _sources_note(),
        f'<script type="application/json" id="matrix-data">{_json_for_script(_data(matrix))}</script>',
        f"<script>{_JS}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _header(matrix: Matrix) -> str:
    dates = sorted(r.date for r in matrix.runs)
    span = f", results dated {e(dates[0])} to {e(dates[-1])}" if dates else ""
    return (
        "<header><h1>anydevice compatibility matrix</h1>"
        f"<p>Generated only from probe runs: {len(matrix.runs)} run(s) in {len(matrix.columns)} column(s), "
        f"{len(matrix.rows)} probes{span}. The summary first: one row per device column, one cell per probe group, "
        "coloured and in words; each cell links down to its probes, and each probe cell opens its evidence "
        "(log, environment, the command that reproduces it). A column is one device, chip and set of versions. "
        'Every failure says where it comes from: the <a href="#sources">device, the plugin, the vendor package, '
        "a simulation's missing feature, or the harness</a>.</p></header>"
    )


def _notices(matrix: Matrix) -> str:
    items = [f'<li class="problem">Result file not used: {e(p)}</li>' for p in matrix.problems]
    for loaded in matrix.runs:
        health = loaded.run.health
        if not health.device_available:
            items.append(
                f'<li class="unavailable">Run <a href="#{_run_anchor(loaded)}">{e(loaded.source)}</a>: '
                f"the device was not available, so its probes were skipped: {e(health.note or '')}</li>"
            )
        elif not health.sanity_passed:
            items.append(
                f'<li class="unhealthy">Run <a href="#{_run_anchor(loaded)}">{e(loaded.source)}</a> is UNHEALTHY: '
                f"the sanity probe failed, so its other probes are shown as untested, not failed. {e(health.note or '')}</li>"
            )
    if not items:
        return ""
    return f'<section id="notices" role="alert"><h2>Notices</h2><ul>{"".join(items)}</ul></section>'


def _short_label(key: str) -> str:
    if key == DISAGREE:
        return "disagree"
    return "fake (simulated)" if key == Status.FAKE.value else LABEL[Status(key)]


def _symbol(key: str) -> str:
    return DISAGREE_SYMBOL if key == DISAGREE else SYMBOL[Status(key)]


def _counts_line(t: Tally) -> str:
    """``✔ 60 pass · ✘ 2 fail``: every status present, worst first."""
    return " · ".join(
        f'<span class="count st-{key}"><span class="sym" aria-hidden="true">{_symbol(key)}</span> '
        f"{n} {e(_short_label(key))}</span>"
        for key, n in t.ordered()
    )


def _sources_line(t: Tally) -> str:
    if not t.sources:
        return ""
    order = list(Source)
    ordered = sorted(t.sources.items(), key=lambda i: order.index(i[0]))
    parts = ", ".join(f"{n} from the {e(source.value)}" for source, n in ordered)
    return f'<div class="sources">failures: {parts}</div>'


def _passes(t: Tally) -> str:
    """``11/13 work · 2 skip``: how many work, then the rest by status."""
    working = {Status.PASS.value, Status.FALLBACK.value, Status.FAKE.value}
    rest = [f"{n} {_short_label(key)}" for key, n in t.ordered() if key not in working]
    return e(" · ".join([f"{t.working}/{t.total} work", *rest]))


def _group_anchor(group: str) -> str:
    return "group-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in group)


def _column_note(column: Column) -> str:
    """What a column's results mean, for columns that are not a plain run on real hardware."""
    runs = [r.run for r in column.runs]
    if all(not r.health.device_available for r in runs):
        return "device not available here: every probe skipped"
    if any(r.health.device_available and not r.health.sanity_passed for r in runs):
        return "unhealthy run: the sanity probe failed, other probes untested"
    if any(r.hardware.simulated for r in runs):
        return "simulated vendor module: tests the plugin's code paths, not the hardware"
    return ""


def _summary(matrix: Matrix) -> str:
    if not matrix.columns:
        return ""
    groups = matrix.shims
    head = "".join(f'<th scope="col"><a href="#{_group_anchor(g)}">{e(g)}</a></th>' for g in groups)
    rows = []
    for column in matrix.columns:
        overall = tally(matrix, column)
        note = _column_note(column)
        cells = []
        for group in groups:
            t = tally(matrix, column, group)
            worst = t.worst
            cells.append(
                f'<td class="grid st-{worst}" data-worst="{worst}" data-group="{e(group)}">'
                f'<a href="#{_group_anchor(group)}" title="{e(group)} probes on {e(column.label)}">'
                f'<span class="worst"><span class="sym" aria-hidden="true">{_symbol(worst)}</span> '
                f"{e(_short_label(worst))}</span>"
                f'<span class="passes">{_passes(t)}</span></a>{_sources_line(t)}</td>'
            )
        rows.append(
            f'<tr data-column="{column.id}"><th scope="row"><a href="#col-{column.id}">{e(column.label)}</a>'
            f'<div class="versions">{e(column.versions)}</div>'
            f'<div class="overall">{overall.working}/{overall.total} probes work</div>'
            + (f'<div class="flag">{e(note)}</div>' if note else "")
            + "</th>"
            + "".join(cells)
            + "</tr>"
        )
    return (
        '<section id="summary"><h2>Summary: which device does what</h2>'
        "<p>One row per device column, one cell per probe group: the worst status in the group (colour and words), "
        "how many of its probes work (pass, pass with CPU fallback, or pass against a simulation), and where its "
        "failures come from. Each cell links down to the group's probes.</p>"
        '<div class="scroll"><table id="summary-grid"><thead><tr><th scope="col">Device column</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _versions(matrix: Matrix) -> str:
    rows, minors = [], []
    for pv in plugin_versions(matrix):
        if pv.columns:
            ran = "".join(
                f'<li><a href="#col-{c.id}">{e(c.label)}</a>: {e(ran_pair(c))}'
                + (f" ({e(note)})" if (note := _column_note(c)) else "")
                + "</li>"
                for c in pv.columns
            )
            ran_html = f"<ul>{ran}</ul>"
        else:
            hint = " (<code>scripts/gpu-check</code> on a GPU machine makes one)" if pv.vendor_package == "torch" else ""
            ran_html = f'<span class="none">not run here: no result file yet{hint}</span>'
        by_minor = "".join(f'<td class="v-{c.status}" title="{e(c.note)}">{e(c.status)}</td>' for c in pv.cells)
        rows.append(
            f'<tr data-plugin="{e(pv.plugin)}"><th scope="row">{e(pv.plugin)}</th><td>{e(", ".join(pv.devices))}</td>'
            f"<td>{e(pv.vendor_package or '-')}</td><td>{e(pv.supported)}</td><td>{ran_html}</td>{by_minor}</tr>"
        )
        minors = [c.torch for c in pv.cells]
    return (
        '<section id="versions"><h2>Versions: supported pairs, and what ran here</h2>'
        "<p>The torch / vendor-package pairs each plugin supports (from its declared vendor package and the "
        "pairing rule anydevice's version preflight applies), and the pairs the result files on this page ran. Per torch "
        "version: <b>tested</b> (a test lane of <code>scripts/test</code> or a result file ran it; hover for what), "
        "declared (anydevice or the vendor package claims it, nothing ran it here), none (no vendor release for that torch).</p>"
        '<div class="scroll"><table id="versions-table"><thead><tr><th scope="col">plugin</th><th scope="col">devices</th>'
        '<th scope="col">vendor package</th><th scope="col">supported pairs</th><th scope="col">ran here</th>'
        + "".join(f'<th scope="col">torch {e(m)}</th>' for m in minors)
        + "</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _sources_note() -> str:
    items = {
        Source.DEVICE: "torch's own backend for the device failed (no vendor package involved)",
        Source.PLUGIN: "anydevice's plugin raised, or declares the feature unsupported",
        Source.VENDOR: "the vendor package (torch_xla, torch_tpu, torch-neuronx, ...) failed with its torch",
        Source.SIMULATION: "the simulated vendor module lacks the feature: the plugin's code path ran up to there, "
        "and nothing is said about the real hardware",
        Source.HARNESS: "the probe harness or the anydevice API it calls was at fault",
    }
    lis = "".join(f"<li><strong>from the {e(k.value)}</strong>: {e(v)}</li>" for k, v in items.items())
    return (
        '<section id="sources"><h2>Where a failure comes from</h2><p>Read from each result\'s evidence: a declared '
        "claim, the exception's module, whether the run was simulated, the failing stage.</p>"
        f"<ul>{lis}</ul></section>"
    )


def _legend() -> str:
    items = "".join(
        f'<li><span class="badge st-{s.value}"><span class="sym" aria-hidden="true">{SYMBOL[s]}</span> {e(LABEL[s])}</span> '
        f"{e(MEANING[s])}</li>"
        for s in Status
    )
    items += (
        f'<li><span class="badge st-disagree"><span class="sym" aria-hidden="true">{DISAGREE_SYMBOL}</span> disagree</span> '
        "runs in this column saw different statuses; the evidence lists each</li>"
        f'<li><span class="badge"><span class="sym" aria-hidden="true">{CLAIM_MISMATCH_SYMBOL}</span> claimed …</span> '
        "the probe contradicts what the plugin declares: claimed unsupported but it works, "
        "or claimed supported but it fails</li>"
        '<li><span class="badge">(declared unsupported)</span> the plugin declares it does not support this; '
        "a fail or skip here is what it expects</li>"
    )
    return f'<section id="legend"><h2>Legend</h2><ul class="legend">{items}</ul></section>'


def _filters(matrix: Matrix) -> str:
    shims = "".join(f'<option value="{e(s)}">{e(s)}</option>' for s in matrix.shims)
    statuses = "".join(f'<option value="{s.value}">{e(LABEL[s])}</option>' for s in Status)
    return (
        '<div id="filters" role="group" aria-label="Filters">'
        f'<label>Shim <select id="filter-shim"><option value="all">all</option>{shims}</select></label> '
        f'<label>Status <select id="filter-status"><option value="all">any</option>{statuses}'
        '<option value="disagree">disagree</option><option value="claim-mismatch">contradicts the plugin\'s claim</option>'
        "</select></label> "
        f'<output id="filter-count">{len(matrix.rows)} of {len(matrix.rows)} probes shown</output></div>'
    )


def _table(matrix: Matrix) -> str:
    if not matrix.columns:
        return '<p id="empty">No valid result files: nothing to show.</p>'
    head = "".join(_column_head(matrix, c) for c in matrix.columns)
    body = []
    group = None
    for row in matrix.rows:
        if row.shim != group:
            group = row.shim
            body.append(
                f'<tr class="group-row" id="{_group_anchor(group)}" data-shim="{e(group)}">'
                f'<th scope="rowgroup" colspan="{len(matrix.columns) + 2}">{e(group)}</th></tr>'
            )
        cells = [matrix.cell(row.probe, c) for c in matrix.columns]
        statuses = sorted({cell_key(c) for c in cells} | ({"claim-mismatch"} if any(_mismatches(c) for c in cells) else set()))
        body.append(
            f'<tr class="probe-row" id="probe-{e(row.probe)}" data-shim="{e(row.shim)}" data-statuses="{e(" ".join(statuses))}">'
            f'<th scope="row"><code>{e(row.probe)}</code><div class="desc">{e(row.description)}</div></th>'
            f'<td class="shim">{e(row.shim)}</td>'
            + "".join(_cell(row.probe, column, cell) for column, cell in zip(matrix.columns, cells, strict=True))
            + "</tr>"
        )
    return (
        f'<section id="probes"><h2>Every probe</h2>{_filters(matrix)}<div class="scroll"><table id="matrix"><thead><tr>'
        f'<th scope="col">Probe</th><th scope="col">Group</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        "</div></section>"
    )


def _column_head(matrix: Matrix, column: Column) -> str:
    runs = ", ".join(f'<a href="#{_run_anchor(r)}">{e(r.date[:10])}</a>' for r in column.runs)
    flags = ""
    if any(not r.run.health.device_available for r in column.runs):
        flags += '<div class="flag unavailable">device not available</div>'
    if any(r.run.health.device_available and not r.run.health.sanity_passed for r in column.runs):
        flags += '<div class="flag unhealthy">unhealthy run: sanity failed</div>'
    if any(r.run.hardware.simulated for r in column.runs):
        flags += '<div class="flag simulated">simulated: tests the plugin\'s code paths, not the hardware</div>'
    return (
        f'<th scope="col" id="col-{column.id}" class="col"><div class="label">{e(column.label)}</div>'
        f'<div class="versions">{e(column.versions)}</div><div class="counts">{_counts_line(tally(matrix, column))}</div>'
        f'<div class="runs">{len(column.runs)} run(s): {runs}</div>{flags}</th>'
    )


def _cell(probe: str, column: Column, cell: Cell) -> str:
    status = cell.status
    if status is None:
        counts = ", ".join(f"{LABEL[s]} ×{n}" for s, n in cell.counts())
        summary = f'<span class="sym" aria-hidden="true">{DISAGREE_SYMBOL}</span> disagree: {e(counts)}'
    else:
        summary = f'<span class="sym" aria-hidden="true">{SYMBOL[status]}</span> {e(LABEL[status])}'
        stages = sorted({r.failure_stage.value for _, r in cell.entries if r.failure_stage is not None})
        if stages:
            summary += f" at {e('/'.join(stages))}"
    summary += _claim_note(cell)
    sources = sorted({found.short for loaded, r in cell.entries if (found := origin(loaded.run, r)) is not None})
    if sources:
        summary += f' <span class="origin">{e(", ".join(sources))}</span>'
    if not cell.entries:
        evidence = f"<p>Nobody ran <code>{e(probe)}</code> on this column.</p>"
    else:
        evidence = "".join(_evidence(probe, loaded, result) for loaded, result in cell.entries)
    key = cell_key(cell)
    return (
        f'<td class="cell st-{key}" data-status="{key}" headers="col-{column.id}">'
        f'<details><summary>{summary}</summary><div class="evidence">{evidence}</div></details></td>'
    )


def _mismatches(cell: Cell) -> list[ProbeResult]:
    return [r for _, r in cell.entries if claims.mismatch(r)]


def _claim_note(cell: Cell) -> str:
    """The claim in words under the status: a contradicted claim, or that the plugin declares it unsupported."""
    contradicted = _mismatches(cell)
    if contradicted:
        return (
            f' <span class="claim mismatch"><span class="sym" aria-hidden="true">{CLAIM_MISMATCH_SYMBOL}</span> '
            f"{e(claims.short(contradicted[0]))}</span>"
        )
    notes = sorted({n for _, r in cell.entries if (n := claims.short(r))})
    return f' <span class="claim">({e(notes[0])})</span>' if notes else ""


def _claims_section(matrix: Matrix) -> str:
    def item(f: claims.Finding) -> str:
        r = f.result
        observed = f"{SYMBOL[r.status]} {LABEL[r.status]}" + (f" at {r.failure_stage.value}" if r.failure_stage else "")
        verdict = f"{CLAIM_MISMATCH_SYMBOL} {f.contradiction}" if f.contradiction else "agrees"
        claim = claims.describe(r.expected) if r.expected else ""
        return (
            f'<li><a href="#probe-{e(r.probe)}"><code>{e(r.probe)}</code></a> on {e(f.column.label)} '
            f"({e(f.loaded.source)}): {e(verdict)}; observed {e(observed)}; the plugin claims {e(claim)}</li>"
        )

    found = claims.findings(matrix)
    if not found:
        return ""
    contradicted = [f for f in found if f.contradiction]
    declared = [f for f in found if not f.contradiction]
    parts = [
        '<section id="claims"><h2>Claimed vs observed</h2><p>Every probe a plugin does not declare unsupported '
        "(<code>DeviceSpec.unsupported</code>) is claimed supported.</p>"
    ]
    if contradicted:
        parts.append(f"<h3>Contradicting the plugin ({len(contradicted)})</h3><ul>{''.join(item(f) for f in contradicted)}</ul>")
    if declared:
        parts.append(f"<h3>Declared unsupported ({len(declared)})</h3><ul>{''.join(item(f) for f in declared)}</ul>")
    return "".join(parts) + "</section>"


def _evidence(probe: str, loaded: LoadedRun, result: ProbeResult) -> str:
    run = loaded.run
    rows: list[tuple[str, str]] = [
        ("status", LABEL[result.status] + (f" at {result.failure_stage.value}" if result.failure_stage else ""))
    ]
    for name, value in (
        ("reason", result.reason),
        ("message", result.message),
        ("exception", result.exception_type),
    ):
        if value:
            rows.append((name, value))
    if result.numerics is not None:
        n = result.numerics
        rows.append(
            (
                "numerics",
                f"max abs err {n.max_abs_err:.3g} (atol {n.atol}, rtol {n.rtol}) vs {n.reference}"
                if n.max_abs_err is not None
                else f"vs {n.reference}",
            )
        )
    found = origin(run, result)
    if found is not None:
        rows.append(("comes from", f"the {found.source.value}: {found.why}"))
    if result.expected is not None:
        rows.append(("plugin claims", claims.describe(result.expected)))
        contradiction = claims.mismatch(result)
        rows.append(("claim vs observed", f"{CLAIM_MISMATCH_SYMBOL} {contradiction}" if contradiction else "agree"))
    if result.fallback_ops:
        rows.append(("CPU fallback ops", ", ".join(result.fallback_ops)))
    if result.params:
        rows.append(("params", ", ".join(f"{k}={v}" for k, v in sorted(result.params.items()))))
    rows += [
        ("duration", f"{result.duration_s:.3f} s"),
        ("date", loaded.date),
        ("run", f"{loaded.source} ({run.run_id})"),
        ("environment", _env_line(loaded)),
    ]
    table = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
    command = reproduce_command(run.invocation.ANYDEVICE or run.plugin.name, ["--only", probe])
    log = result.log[-LOG_EXCERPT:] if result.log else ""
    log_html = f'<pre class="log">{e(log)}</pre>' if log else '<p class="nolog">(no log output)</p>'
    return (
        f'<div class="entry"><table class="kv">{table}</table>'
        f'<p>Reproduce: <code class="cmd">{e(command)}</code></p>{log_html}</div>'
    )


def _env_line(loaded: LoadedRun) -> str:
    run = loaded.run
    parts = [
        f"anydevice {run.anydevice.version}" + (f" ({run.anydevice.git_sha})" if run.anydevice.git_sha else ""),
        f"torch {run.env.torch or '?'}",
    ]
    if run.plugin.vendor_package:
        parts.append(f"{run.plugin.vendor_package} {run.plugin.vendor_version or '?'}")
    parts += [f"{k} {v}" for k, v in sorted(run.env.runtimes.items()) if k != run.plugin.vendor_package]
    hw = run.hardware
    parts += [
        f"chip {hw.chip or 'unknown'} x{hw.device_count}" + (f" ({SIMULATED})" if hw.simulated else ""),
        f"python {run.env.python}",
        run.env.os,
    ]
    return " · ".join(parts)


def _run_anchor(loaded: LoadedRun) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in loaded.key)


def _runs(matrix: Matrix) -> str:
    rows = []
    for loaded in matrix.runs:
        run = loaded.run
        health = "healthy" if loaded.healthy else ("device not available" if not run.health.device_available else "UNHEALTHY")
        counts: dict[Status, int] = {}
        for result in run.results:
            counts[result.status] = counts.get(result.status, 0) + 1
        summary = ", ".join(f"{SYMBOL[s]} {LABEL[s]} {counts[s]}" for s in Status if s in counts)
        rows.append(
            f'<tr id="{_run_anchor(loaded)}"><td>{e(loaded.source)}</td><td><code>{e(run.run_id)}</code></td>'
            f"<td>{e(loaded.device)}</td><td>{e(loaded.date)}</td><td>{e(health)}</td><td>{e(summary)}</td>"
            f'<td>{e(_env_line(loaded))}</td><td><code class="cmd">{e(run.invocation.command)}</code></td></tr>'
        )
    return (
        '<section id="runs"><h2>Runs</h2><div class="scroll"><table class="runs"><thead><tr><th>file</th><th>run</th>'
        "<th>device</th><th>started (UTC)</th><th>health</th><th>results</th><th>environment</th><th>command</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _diff_section(matrix: Matrix) -> str:
    options = "".join(f'<option value="{e(r.key)}">{e(r.device)} — {e(r.date)} ({e(r.source)})</option>' for r in matrix.runs)
    if not matrix.diffs:
        return ""  # no device has two runs: nothing to compare, so no section
    later = [d for d in matrix.diffs if d.new.run.started_at > d.old.run.started_at]
    default = (later or matrix.diffs)[-1]
    body = _diff_body(default)
    a = e(default.old.key)
    b = e(default.new.key)
    return (
        '<section id="diff"><h2>Diff between two runs of the same device</h2>'
        f'<label>Older <select id="diff-a" data-default="{a}">{options}</select></label> '
        f'<label>Newer <select id="diff-b" data-default="{b}">{options}</select></label>'
        f'<div id="diff-result" aria-live="polite">{body}</div></section>'
    )


def _diff_body(diff: Diff) -> str:
    def block(title: str, cls: str, changes: list[Any]) -> str:
        items = "".join(
            f"<li><code>{e(c.probe)}</code>: {SYMBOL[c.old]} {e(LABEL[c.old])} → {SYMBOL[c.new]} {e(LABEL[c.new])}</li>"
            for c in changes
        )
        return f'<h3 class="{cls}">{e(title)} ({len(changes)})</h3>' + (f"<ul>{items}</ul>" if items else "<p>none</p>")

    return (
        f"<p>{e(diff.device)}: {e(diff.old.date)} ({e(diff.old.source)}) → {e(diff.new.date)} ({e(diff.new.source)})</p>"
        + block("Newly broken", "broken", diff.broken)
        + block("Newly working", "fixed", diff.fixed)
        + block("Other changes", "changed", diff.changed)
    )


def _data(matrix: Matrix) -> dict[str, Any]:
    return {
        "labels": {s.value: LABEL[s] for s in Status},
        "symbols": {s.value: SYMBOL[s] for s in Status},
        "runs": [
            {
                "key": r.key,
                "device": r.device,
                "date": r.date,
                "source": r.source,
                "statuses": {res.probe: res.status.value for res in r.run.results},
            }
            for r in matrix.runs
        ],
    }


def _json_for_script(data: object) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


_CSS = """
:root{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:14px;color:#1a1a1a;background:#fff}
body{margin:1rem 1.5rem}h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem}
.scroll{overflow-x:auto}table{border-collapse:collapse}
#matrix>thead>tr>th,#matrix>tbody>tr>th,#matrix>tbody>tr>td{border:1px solid #ccc;padding:.3rem .45rem;vertical-align:top;
  text-align:left}
#matrix>thead>tr>th{position:sticky;top:0;background:#f4f4f4;z-index:1}
th.col{min-width:11rem}.versions,.runs,.desc{font-weight:normal;font-size:.8rem;color:#444}
.flag{font-size:.8rem;font-weight:bold;margin-top:.2rem}.flag.unhealthy::before,.flag.unavailable::before{content:"⚠ "}
td.shim{font-size:.8rem;color:#444}
summary{cursor:pointer;white-space:nowrap}.claim{display:block;font-size:.8rem;margin-left:1.1em}
.claim.mismatch{font-weight:bold}.sym{display:inline-block;width:1.1em;text-align:center;font-weight:bold}
.evidence{max-width:42rem;white-space:normal;margin-top:.3rem}
.entry{border-top:1px dashed #999;padding-top:.3rem;margin-top:.3rem}
table.kv th{font-weight:600;padding-right:.5rem;vertical-align:top;white-space:nowrap}table.kv td{word-break:break-word}
pre.log{max-height:14rem;overflow:auto;background:#f7f7f7;border:1px solid #ddd;padding:.4rem;font-size:.75rem;
  white-space:pre-wrap;word-break:break-all}
code.cmd{background:#eef;padding:0 .2rem;word-break:break-all}
.badge{display:inline-block;min-width:12rem;padding:.1rem .3rem;border-radius:.2rem}
ul.legend{list-style:none;padding:0}ul.legend li{margin:.15rem 0}
.st-pass{background:#e3f5e1}.st-pass_cpu_fallback{background:#f3f7d4}.st-partial{background:#fff1cc}
.st-fail{background:#fbdcdc}.st-skip{background:#efefef}.st-harness_error{background:#f6dff6}
.st-untested{background:#fff}.st-fake{background:#e4ecfb}.st-disagree{background:#ffe4c4}
#notices{border:2px solid #b00;padding:.3rem 1rem;margin:1rem 0}#notices li.problem::before{content:"✘ "}
#filters{margin:1rem 0;display:flex;gap:1rem;align-items:center;flex-wrap:wrap}
table.runs td,table.runs th{border:1px solid #ccc;padding:.25rem .4rem;font-size:.85rem;vertical-align:top}
h3.broken::before{content:"✘ "}h3.fixed::before{content:"✔ "}h3.changed::before{content:"• "}
tr[hidden]{display:none}
#summary-grid{margin-top:.5rem}
#summary-grid th,#summary-grid td{border:1px solid #bbb;padding:.35rem .5rem;vertical-align:top;text-align:left}
#summary-grid thead th{background:#f4f4f4}#summary-grid th[scope=row]{min-width:14rem;max-width:22rem}
#summary-grid td.grid{min-width:8.5rem}#summary-grid td.grid a{display:block;color:inherit;text-decoration:none}
#summary-grid td.grid a:hover .worst{text-decoration:underline}
#summary-grid .worst{display:block;font-weight:bold;font-size:1rem}#summary-grid .passes{display:block;font-size:.85rem}
#summary-grid td.st-fail{border-left:5px solid #c62828}#summary-grid td.st-pass{border-left:5px solid #2e7d32}
#summary-grid td.st-fake{border-left:5px solid #3057b0}#summary-grid td.st-skip{border-left:5px solid #999}
#summary-grid td.st-partial,#summary-grid td.st-pass_cpu_fallback{border-left:5px solid #c49000}
#summary-grid td.st-harness_error{border-left:5px solid #8e24aa}#summary-grid td.st-disagree{border-left:5px solid #e65100}
.overall{font-size:.85rem;font-weight:600;margin-top:.2rem}.sources{font-size:.75rem;color:#333;margin-top:.15rem}
.flag.simulated{color:#3057b0}.flag.simulated::before{content:"◇ "}
.counts{font-weight:normal;font-size:.78rem;margin-top:.2rem}.count{white-space:nowrap;padding:0 .15rem;border-radius:.2rem}
.origin{display:block;font-size:.78rem;margin-left:1.1em;font-style:italic}
tr.group-row th{background:#e9eef5;text-align:left;font-size:1rem;padding:.35rem .45rem;border:1px solid #ccc}
#versions-table th,#versions-table td{border:1px solid #ccc;padding:.3rem .45rem;vertical-align:top;text-align:left}
#versions-table ul{margin:0;padding-left:1.1rem}#versions-table .none{color:#555;font-style:italic}
#versions-table .v-tested{background:#d9f2d9;font-weight:600}
#versions-table .v-declared{color:#333}#versions-table .v-none{color:#777}
"""

_JS = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("matrix-data").textContent);
  var shim = document.getElementById("filter-shim");
  var status = document.getElementById("filter-status");
  var count = document.getElementById("filter-count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#matrix tr.probe-row"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("#matrix tr.group-row"));
  function applyFilters() {
    var shown = 0, shownGroups = {};
    rows.forEach(function (tr) {
      var okShim = shim.value === "all" || tr.getAttribute("data-shim") === shim.value;
      var okStatus = status.value === "all" || tr.getAttribute("data-statuses").split(" ").indexOf(status.value) >= 0;
      tr.hidden = !(okShim && okStatus);
      if (!tr.hidden) { shown += 1; shownGroups[tr.getAttribute("data-shim")] = true; }
    });
    groups.forEach(function (tr) { tr.hidden = !shownGroups[tr.getAttribute("data-shim")]; });
    count.textContent = shown + " of " + rows.length + " probes shown";
  }
  if (shim && status) {
    shim.addEventListener("change", applyFilters);
    status.addEventListener("change", applyFilters);
  }
  var byKey = {};
  data.runs.forEach(function (run) { byKey[run.key] = run; });
  var selA = document.getElementById("diff-a");
  var selB = document.getElementById("diff-b");
  var out = document.getElementById("diff-result");
  var working = ["pass", "pass_cpu_fallback", "fake"];
  var broken = ["fail", "harness_error", "partial"];
  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined) { node.textContent = text; }
    if (cls) { node.className = cls; }
    return node;
  }
  function label(s) { return data.symbols[s] + " " + data.labels[s]; }
  function renderDiff() {
    var a = byKey[selA.value], b = byKey[selB.value];
    out.textContent = "";
    if (!a || !b) { out.appendChild(el("p", "Pick two runs.")); return; }
    if (a.device !== b.device) {
      out.appendChild(el("p", "These runs are of different devices (" + a.device + " / " + b.device +
        "): pick two runs of the same device."));
      return;
    }
    out.appendChild(el("p", a.device + ": " + a.date + " (" + a.source + ") \\u2192 " + b.date + " (" + b.source + ")"));
    var probes = {};
    Object.keys(a.statuses).forEach(function (p) { probes[p] = true; });
    Object.keys(b.statuses).forEach(function (p) { probes[p] = true; });
    var groups = {broken: [], fixed: [], changed: []};
    Object.keys(probes).sort().forEach(function (p) {
      var x = a.statuses[p] || "untested", y = b.statuses[p] || "untested";
      if (x === y) { return; }
      var kind = working.indexOf(x) >= 0 && broken.indexOf(y) >= 0 ? "broken"
        : (broken.indexOf(x) >= 0 && working.indexOf(y) >= 0 ? "fixed" : "changed");
      groups[kind].push([p, x, y]);
    });
    [["Newly broken", "broken"], ["Newly working", "fixed"], ["Other changes", "changed"]].forEach(function (g) {
      var items = groups[g[1]];
      out.appendChild(el("h3", g[0] + " (" + items.length + ")", g[1]));
      if (!items.length) { out.appendChild(el("p", "none")); return; }
      var ul = el("ul");
      items.forEach(function (c) {
        var li = el("li");
        li.appendChild(el("code", c[0]));
        li.appendChild(document.createTextNode(": " + label(c[1]) + " \\u2192 " + label(c[2])));
        ul.appendChild(li);
      });
      out.appendChild(ul);
    });
  }
  if (selA && selB) {
    if (selA.getAttribute("data-default")) { selA.value = selA.getAttribute("data-default"); }
    if (selB.getAttribute("data-default")) { selB.value = selB.getAttribute("data-default"); }
    selA.addEventListener("change", renderDiff);
    selB.addEventListener("change", renderDiff);
  }
})();
"""
