"""The matrix page: ``index.html`` from Jinja2 templates (autoescaped) and ``index.md``, written and staleness-checked.

The HTML is one self-contained file: ``templates/page.html.j2`` with ``page.css`` and ``page.js``
inlined, no network. This module computes every text the page shows (:func:`page_view`); the
template only lays it out, and autoescaping makes every text from a result file plain text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from anydevice.compat_matrix import claims
from anydevice.compat_matrix.claims import Source, origin
from anydevice.compat_matrix.merge import (
    DISAGREE,
    EXPORT_NOTE,
    NOT_APPLICABLE,
    Cell,
    Column,
    Diff,
    LoadedRun,
    Matrix,
    Tally,
    build_matrix,
    cell_evidence,
    cell_key,
    column_evidence,
    ran_pair,
    shows,
    tally,
)
from anydevice.compat_matrix.render_md import render_markdown
from anydevice.compat_matrix.runner import probe_command
from anydevice.compat_matrix.schema import (
    CLAIM_MISMATCH_SYMBOL,
    DISAGREE_SYMBOL,
    LABEL,
    SIMULATED,
    SYMBOL,
    WORKING,
    ProbeResult,
    Status,
    shown,
)
from anydevice.compat_matrix.versions_table import LaneRecord, lane_times, plugin_versions
from anydevice.errors import FileAccessError
from anydevice.files.safe_files import Recognise, check_replaceable, read_bytes, write_bytes

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

SOURCES = {
    Source.DEVICE: "torch's own backend for the device failed (no vendor package involved)",
    Source.PLUGIN: "anydevice's plugin raised, or declares the feature unsupported",
    Source.VENDOR: "the vendor package (torch_xla, torch_tpu, torch-neuronx, ...) failed with its torch",
    Source.SIMULATION: "the simulated vendor module lacks the feature: the plugin's code path ran up to there, "
    "and nothing is said about the real hardware",
    Source.HARNESS: "the probe harness or the anydevice API it calls was at fault",
}


@dataclass(frozen=True)
class Site:
    """The rendered files by name, the problems met, and how many runs went in."""

    files: dict[str, str]
    problems: list[str]
    run_count: int
    cuts: list[str] = field(default_factory=list)
    """The files cut to fit the page, each with what was cut."""


def build_site(results: Iterable[Path], lanes: Sequence[LaneRecord] | None = None) -> Site:
    """Render the page from result files and lane records (``None``: the committed ones, ``compat_matrix/lanes/``);
    deterministic for the same files, whatever their order."""
    matrix = build_matrix(results, lanes)
    files = {"index.html": render_html(matrix), "index.md": render_markdown(matrix)}
    return Site(files, list(matrix.problems), len(matrix.runs), list(matrix.cuts))


GENERATED: dict[str, bytes] = {
    "index.html": b"<title>anydevice compatibility matrix</title>",
    "index.md": b"# anydevice compatibility matrix\n",
}
"""How each file of the page begins (within its first kilobyte): what ``render`` may replace without ``--force``."""

MAX_PAGE = 256 << 20


def generated(name: str) -> Recognise:
    """Whether a file's contents are a page ``render`` wrote as ``name`` (and may replace)."""
    return lambda content: GENERATED[name] in content[:1024]


def check_out(site: Site, out: Path, *, force: bool = False) -> None:
    """Raise :class:`~anydevice.errors.FileAccessError` when a file of the page cannot replace what is in ``out`` (a
    hand-written ``index.md``, a link, another user's file) unless ``force``; checked before any file is written."""
    for name in sorted(site.files):
        check_replaceable(out / name, ours=generated(name), force=force, force_hint="pass --force")


def write_site(site: Site, out: Path, *, force: bool = False) -> list[Path]:
    """Write the files under ``out``, each atomically (:func:`anydevice.files.safe_files.write_bytes`); returns their paths.

    What is there already is replaced only when ``render`` wrote it, or with ``force``; every file is checked first,
    so a refusal writes none of them.
    """
    check_out(site, out, force=force)
    written = []
    for name, text in sorted(site.files.items()):
        path = out / name
        write_bytes(path, text.encode("utf-8"), ours=generated(name), force=force, force_hint="pass --force")
        written.append(path)
    return written


def check_site(site: Site, out: Path) -> list[str]:
    """Names of files under ``out`` that are missing, differ from ``site``, or are not plain files (a link, a FIFO)."""
    stale = []
    for name, text in sorted(site.files.items()):
        try:
            on_disk = read_bytes(out / name, limit=MAX_PAGE, follow_links=False)
        except (OSError, FileAccessError):
            on_disk = None
        if on_disk != text.encode("utf-8"):
            stale.append(name)
    return stale


@cache
def environment() -> jinja2.Environment:
    """The templates shipped in ``anydevice/compat_matrix/templates``, autoescaped."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("anydevice.compat_matrix", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    # the data blob: compact, stable, and safe inside <script> (tojson escapes < > & ')
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False, "separators": (",", ":")}
    return env


def render_html(matrix: Matrix) -> str:
    """The whole page."""
    return environment().get_template("page.html.j2").render(page_view(matrix))


# -- what the page shows, as plain text; the template adds the markup -----------------------


def page_view(matrix: Matrix) -> dict[str, Any]:
    """Every value the template reads."""
    dates = sorted(r.date for r in matrix.runs)
    return {
        "matrix": matrix,
        "span": (dates[0], dates[-1]) if dates else None,
        "notices": _notices(matrix),
        "summary": [_summary_row(matrix, c) for c in matrix.columns],
        "groups": [(g, group_anchor(g)) for g in matrix.shims],
        "versions": _versions(matrix),
        "lane_times": lane_times(matrix.lanes),
        "legend": [(s.value, SYMBOL[s], LABEL[s], MEANING[s]) for s in Status],
        "sources": [(k.value, v) for k, v in SOURCES.items()],
        "statuses": [(s.value, LABEL[s]) for s in Status],
        "heads": [_column_head(matrix, c) for c in matrix.columns],
        "table": _table(matrix),
        "claims": _claims(matrix),
        "runs": [_run_row(r) for r in matrix.runs],
        "diff": _diff(matrix),
        "data": _data(matrix),
        "DISAGREE_SYMBOL": DISAGREE_SYMBOL,
        "CLAIM_MISMATCH_SYMBOL": CLAIM_MISMATCH_SYMBOL,
        "NOT_APPLICABLE": NOT_APPLICABLE,
        "EXPORT_NOTE": EXPORT_NOTE,
    }


def group_anchor(group: str) -> str:
    """The id of a probe group's first row."""
    return "group-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in group)


def run_anchor(loaded: LoadedRun) -> str:
    """The id of a run's row in the runs table."""
    return "run-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in loaded.key)


def _short_label(key: str) -> str:
    if key == DISAGREE:
        return "disagree"
    return "fake (simulated)" if key == Status.FAKE.value else LABEL[Status(key)]


def _symbol(key: str) -> str:
    return DISAGREE_SYMBOL if key == DISAGREE else SYMBOL[Status(key)]


def _counts(t: Tally) -> list[tuple[str, str, int, str]]:
    """``(key, symbol, count, label)`` for every status present, worst first."""
    return [(key, _symbol(key), n, _short_label(key)) for key, n in t.ordered()]


def _passes(t: Tally) -> str:
    """``11/13 work · 2 skip``: how many work, then the rest by status."""
    working = {s.value for s in WORKING}
    rest = [f"{n} {_short_label(key)}" for key, n in t.ordered() if key not in working]
    return " · ".join([f"{t.working}/{t.total} work", *rest])


def _failure_sources(t: Tally) -> str | None:
    if not t.sources:
        return None
    order = list(Source)
    ordered = sorted(t.sources.items(), key=lambda i: order.index(i[0]))
    return ", ".join(f"{n} from the {source.value}" for source, n in ordered)


def column_note(column: Column) -> str:
    """What a column's results mean, for columns that are not a plain run on real hardware."""
    runs = [r.run for r in column.runs]
    if all(not r.health.device_available for r in runs):
        return "device not available here: every probe skipped"
    if any(r.health.device_available and not r.health.sanity_passed for r in runs):
        return "unhealthy run: the sanity probe failed, other probes untested"
    if any(r.hardware.simulated for r in runs):
        return "simulated vendor module: tests the plugin's code paths, not the hardware"
    if runs[0].export is not None:
        return f"{runs[0].export.kind} target, not a device: {runs[0].export.runs_on}"
    return ""


def _notices(matrix: Matrix) -> list[dict[str, str]]:
    items = [{"kind": "problem", "text": p} for p in matrix.problems]
    items += [{"kind": "cut", "text": c} for c in matrix.cuts]
    for loaded in matrix.runs:
        health = loaded.run.health
        kind = "unavailable" if not health.device_available else "unhealthy" if not health.sanity_passed else None
        if kind is not None:
            items.append({"kind": kind, "anchor": run_anchor(loaded), "source": loaded.source, "note": health.note or ""})
    return items


def _summary_row(matrix: Matrix, column: Column) -> dict[str, Any]:
    cells = []
    for group in matrix.shims:
        t = tally(matrix, column, group)
        cells.append(
            {
                "group": group,
                "anchor": group_anchor(group),
                "worst": t.worst,
                "symbol": _symbol(t.worst) if t.total else "·",
                "label": _short_label(t.worst) if t.total else NOT_APPLICABLE,
                "passes": _passes(t) if t.total else "",
                "sources": _failure_sources(t),
            }
        )
    return {
        "column": column,
        "overall": tally(matrix, column),
        "note": column_note(column),
        "level": column_evidence(column).label(),
        "cells": cells,
    }


def _versions(matrix: Matrix) -> list[dict[str, Any]]:
    return [
        {
            "pv": pv,
            "ran": [(c, ran_pair(c), column_note(c)) for c in pv.columns],
            "gpu_hint": pv.vendor_package == "torch",
        }
        for pv in plugin_versions(matrix, lanes=matrix.lanes)
    ]


def _column_head(matrix: Matrix, column: Column) -> dict[str, Any]:
    flags = []
    if any(not r.run.health.device_available for r in column.runs):
        flags.append(("unavailable", "device not available"))
    if any(r.run.health.device_available and not r.run.health.sanity_passed for r in column.runs):
        flags.append(("unhealthy", "unhealthy run: sanity failed"))
    if any(r.run.hardware.simulated for r in column.runs):
        flags.append(("simulated", "simulated: tests the plugin's code paths, not the hardware"))
    return {
        "column": column,
        "counts": _counts(tally(matrix, column)),
        "runs": [(run_anchor(r), r.date[:10]) for r in column.runs],
        "level": column_evidence(column).label(),
        "flags": flags,
    }


def _table(matrix: Matrix) -> list[dict[str, Any]]:
    """The probe rows grouped, in page order."""
    groups: list[dict[str, Any]] = []
    for row in matrix.rows:
        if not groups or groups[-1]["name"] != row.shim:
            groups.append({"name": row.shim, "anchor": group_anchor(row.shim), "rows": []})
        cells = [matrix.cell(row.probe, c) for c in matrix.columns]
        mismatch = {"claim-mismatch"} if any(c.contradicts for c in cells) else set()
        groups[-1]["rows"].append(
            {
                "row": row,
                "statuses": " ".join(sorted({cell_key(c) for c in cells} | mismatch)),
                "cells": [
                    _cell(row.probe, column, cell) if shows(matrix, row, column) else _not_applicable(row.probe, column)
                    for column, cell in zip(matrix.columns, cells, strict=True)
                ],
            }
        )
    return groups


def _cell(probe: str, column: Column, cell: Cell) -> dict[str, Any]:
    status = cell.status
    if status is None:
        symbol, text = DISAGREE_SYMBOL, "disagree: " + ", ".join(f"{LABEL[s]} ×{n}" for s, n in cell.counts())
    else:
        symbol, text = SYMBOL[status], LABEL[status] + (f" at {cell.stages}" if cell.stages else "") + cell.skipped_beside
    claim = None
    if cell.claim:
        claim = {"mismatch": cell.contradicts, "text": cell.claim if cell.contradicts else f"({cell.claim})"}
    return {
        "key": cell_key(cell),
        "column": column,
        "probe": probe,
        "symbol": symbol,
        "text": text,
        "claim": claim,
        "sources": ", ".join(cell.origins),
        "level": cell_evidence(cell, column).label(),
        "evidence": [_evidence(probe, loaded, result) for loaded, result in cell.entries],
    }


def _not_applicable(probe: str, column: Column) -> dict[str, Any]:
    """A cell of a probe the column does not run (a device probe in an export column, or back)."""
    cell = {"key": "untested", "column": column, "probe": probe, "symbol": "·", "text": NOT_APPLICABLE}
    return {**cell, "claim": None, "sources": "", "level": "unknown", "evidence": []}


def _evidence(probe: str, loaded: LoadedRun, result: ProbeResult) -> dict[str, Any]:
    run = loaded.run
    rows: list[tuple[str, str]] = [
        ("status", LABEL[result.status] + (f" at {result.failure_stage.value}" if result.failure_stage else ""))
    ]
    for name, value in (("reason", result.reason), ("message", result.message), ("exception", result.exception_type)):
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
        ("environment", env_line(loaded)),
    ]
    return {
        "rows": rows,
        "command": probe_command(run, probe),
        "log": result.log[-LOG_EXCERPT:] if result.log else "",
    }


def env_line(loaded: LoadedRun) -> str:
    """A run's software and hardware in one line."""
    run = loaded.run
    parts = [
        f"anydevice {run.anydevice.version}" + (f" ({run.anydevice.git_sha})" if run.anydevice.git_sha else ""),
        f"torch {run.env.torch or '?'}",
    ]
    if run.plugin.vendor_package:
        parts.append(f"{run.plugin.vendor_package} {run.plugin.vendor_version or '?'}")
    parts += [f"{k} {v}" for k, v in sorted(run.env.runtimes.items()) if k != run.plugin.vendor_package]
    parts += [f"{k} {v}" for k, v in sorted(run.env.packages.items())]
    hw = run.hardware
    parts += [
        f"chip {hw.chip or 'unknown'} x{hw.device_count}" + (f" ({SIMULATED})" if hw.simulated else ""),
        f"python {run.env.python}",
        run.env.os,
    ]
    return " · ".join(parts)


def _claims(matrix: Matrix) -> dict[str, list[dict[str, str]]]:
    def item(f: claims.Finding) -> dict[str, str]:
        r = f.result
        return {
            "probe": r.probe,
            "column": f.column.label,
            "source": f.loaded.source,
            "verdict": f"{CLAIM_MISMATCH_SYMBOL} {f.contradiction}" if f.contradiction else "agrees",
            "observed": shown(r),
            "claim": claims.describe(r.expected) if r.expected else "",
        }

    found = claims.findings(matrix)
    return {
        "contradicted": [item(f) for f in found if f.contradiction],
        "declared": [item(f) for f in found if not f.contradiction],
    }


def _run_row(loaded: LoadedRun) -> dict[str, Any]:
    counts: dict[Status, int] = {}
    for result in loaded.run.results:
        counts[result.status] = counts.get(result.status, 0) + 1
    return {
        "loaded": loaded,
        "anchor": run_anchor(loaded),
        "results": ", ".join(f"{SYMBOL[s]} {LABEL[s]} {counts[s]}" for s in Status if s in counts),
        "env": env_line(loaded),
    }


def _diff(matrix: Matrix) -> dict[str, Any] | None:
    """The diff section (None when no device has two runs): the runs to pick from and the default pair's changes."""
    if not matrix.diffs:
        return None
    later = [d for d in matrix.diffs if d.new.run.started_at > d.old.run.started_at]
    default: Diff = (later or matrix.diffs)[-1]
    return {
        "options": [(r.key, f"{r.device} — {r.date} ({r.source})") for r in matrix.runs],
        "default": default,
        "blocks": [
            (title, cls, [(c.probe, f"{SYMBOL[c.old]} {LABEL[c.old]}", f"{SYMBOL[c.new]} {LABEL[c.new]}") for c in changes])
            for title, cls, changes in (
                ("Newly broken", "broken", default.broken),
                ("Newly working", "fixed", default.fixed),
                ("Other changes", "changed", default.changed),
            )
        ],
    }


def _data(matrix: Matrix) -> dict[str, Any]:
    """What the page's script reads: labels, symbols and every run's statuses (for the diff picker)."""
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
