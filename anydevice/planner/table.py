"""The plan as text: one row per target, then what stands behind each number (torch-free)."""

from __future__ import annotations

from typing import Any


def _gib(n: Any) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


def _s(x: Any) -> str:
    return "-" if x is None else f"{x:.3g} s"


def render(plan: dict[str, Any]) -> str:
    """A table of the targets and, under it, each target's changes that fit and the evidence of its numbers."""
    head = "| target | as written | per chip / capacity | largest batch | checkpointing | sharding | roofline | expected | $/M |"
    lines = [head, "|" + "---|" * 9]
    notes: list[str] = []
    for row in plan["targets"]:
        said, fit, time, cost = row["as_written"], row["fit"], row["time"], row["cost"]
        batch = fit.get("batch", {}).get("found")
        ckpt = fit.get("checkpointing", {}).get("level", "-") or "none fits"
        shard = fit.get("sharding", {}).get("change") or (
            "-" if fit.get("sharding", {}).get("fits") is not False else "does not fit"
        )
        per_m = cost.get("usd_per_million_tokens")
        cells = [
            row["target"],
            said["verdict"],
            f"{_gib(said['per_chip_bytes'])} / {_gib(said['capacity_bytes'])}",
            str(batch or "-"),
            ckpt,
            shard,
            _s(time.get("roofline_seconds")),
            _s(time.get("expected_seconds")),
            "-" if per_m is None else f"{per_m:.3g}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
        notes.append(f"{row['target']}: memory {said['evidence']}; time {time.get('evidence', time.get('note', '-'))}")
        for key in ("batch", "checkpointing", "sharding"):
            got = fit.get(key, {})
            if got.get("change") or got.get("note"):
                took = f"{got.get('compiles', 0)} compiles, {got.get('seconds', 0):g} s"
                notes.append(f"  {key}: {got.get('change') or got.get('note')} ({took})")
        if "refusal" in fit:
            notes.append(f"  refusal: {fit['refusal']['message']} ({fit['refusal'].get('evidence', 'compiled')})")
        if "optimal_seconds" in time:
            notes.append(f"  compiler's optimal_seconds: {time['optimal_seconds']['reason']}")
        if "efficiency" in time:
            notes.append(f"  efficiency: {time['efficiency']['evidence']}")
        notes.append(f"  price: {cost.get('evidence', '-')}")
    cheapest = plan.get("cheapest")
    lines.append("")
    lines.append(f"cheapest that fits as written: {cheapest or 'none'} ({plan.get('cheapest_note', '')})")
    return "\n".join([*lines, "", *notes])
