"""Draw benchmarks/results/benchmarks.png from the JSON results beside it (needs matplotlib).

    python benchmarks/plot.py [--results benchmarks/results] [--out benchmarks/results/benchmarks.png]

Panels: per-step ratio to raw torch (eager and compiled, with Accelerate and Fabric) and to raw
torch_xla; ``anydevice run`` against ``torchrun``; import, selection and discovery cost; the
main job's presets. Bars are medians over rotated rounds; whiskers span the rounds' min to max.
A panel whose results file is missing says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _load(directory: Path, name: str) -> dict[str, Any] | None:
    path = directory / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _missing(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _bars(ax: Any, labels: list[str], stats: list[dict[str, float]], scale: float = 1.0, color: str = "C0") -> None:
    meds = [s["median"] * scale for s in stats]
    lo = [(s["median"] - s["min"]) * scale for s in stats]
    hi = [(s["max"] - s["median"]) * scale for s in stats]
    ax.barh(range(len(labels)), meds, xerr=[lo, hi], color=color, capsize=3)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    for i, m in enumerate(meds):
        ax.text(m, i, f" {m:.3g}", va="center", ha="left", fontsize=8)


def ratio_panel(ax: Any, step: dict[str, Any] | None, xla: dict[str, Any] | None) -> None:
    labels: list[str] = []
    stats: list[dict[str, float]] = []
    colors: list[str] = []
    for data, tag, color in ((step, "", "C0"), (xla, " (XLA lane)", "C1")):
        if data is None:
            continue
        for mode, table in data["ratio_to_raw"].items():
            for name, s in table.items():
                if name.startswith(("raw torch [", "raw torch_xla [")):
                    continue
                labels.append(name.replace(f" [{mode}]", f", {mode}") + tag)
                stats.append(s)
                colors.append(color)
    if not labels:
        _missing(ax, "per-step ratios")
        return
    meds = [s["median"] for s in stats]
    err = [[m - s["min"] for m, s in zip(meds, stats)], [s["max"] - m for m, s in zip(meds, stats)]]
    ax.barh(range(len(labels)), meds, xerr=err, color=colors, capsize=3)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=0.8)
    for i, m in enumerate(meds):
        ax.text(m, i, f" {m:.3f}", va="center", fontsize=8)
    ax.set_xlabel("seconds per step / raw baseline's (same round); 1.0 = no overhead")
    ax.set_title("Per-step time relative to raw torch / raw torch_xla")


def launch_panel(ax: Any, data: dict[str, Any] | None) -> None:
    if data is None:
        _missing(ax, "anydevice run vs torchrun")
        return
    labels, stats = [], []
    for name, s in data["summary"].items():
        for key, what in (
            ("group_up_s", "start-up to group up"),
            ("first_step_done_s", "to first step"),
            ("wall_s", "whole launch"),
        ):
            labels.append(f"{name}: {what}")
            stats.append(s[key])
    _bars(ax, labels, stats, color="C2")
    tps = {name: s["tokens_per_s_per_rank"]["median"] for name, s in data["summary"].items()}
    ax.set_xlabel("seconds (" + ", ".join(f"{n} {v:.0f} tokens/s/rank" for n, v in tps.items()) + ")")
    ax.set_title(f"Launching the same raw DDP script, {data['nproc']} ranks")


def import_panel(ax: Any, data: dict[str, Any] | None) -> None:
    if data is None:
        _missing(ax, "import and selection")
        return
    items = [(k, v) for k, v in data["seconds"].items() if k != "python"]
    _bars(ax, [k for k, _ in items], [v for _, v in items], scale=1e3, color="C3")
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (fresh interpreter each; log scale)")
    ax.set_title("Import, selection and plugin discovery")


def presets_panel(ax: Any, directory: Path) -> None:
    labels, values = [], []
    for path in sorted(directory.glob("presets-*.json")):
        data = json.loads(path.read_text())
        for name, r in data["presets"].items():
            if "tokens_per_s" in r:
                mfu = "" if r.get("mfu") is None else f", MFU {r['mfu']:.3f}"
                labels.append(f"{name} on {data['device']}{mfu}")
                values.append(r["tokens_per_s"])
    if not labels:
        _missing(ax, "main-job presets")
        return
    ax.barh(range(len(labels)), values, color="C4")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.0f}", va="center", fontsize=8)
    ax.set_xlabel("tokens/s (examples/train.py)")
    ax.set_title("Main job presets")


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out", type=Path)
    opts = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 16), gridspec_kw={"height_ratios": [3, 2, 3, 1]})
    ratio_panel(axes[0], _load(opts.results, "step_overhead"), _load(opts.results, "xla_overhead"))
    launch_panel(axes[1], _load(opts.results, "launch_overhead"))
    import_panel(axes[2], _load(opts.results, "import_time"))
    presets_panel(axes[3], opts.results)
    step = _load(opts.results, "step_overhead")
    note = ""
    if step is not None:
        m = step["machine"]
        note = f"{m.get('cpus')} CPUs, load average {m.get('loadavg_1_5_15')} (shared, loaded machine), torch {m.get('torch')}"
    fig.suptitle(f"anydevice benchmarks\n{note}", fontsize=11)
    fig.tight_layout()
    out = opts.out or opts.results / "benchmarks.png"
    fig.savefig(out, dpi=90)
    print(f"wrote {out}", file=sys.stderr)
    return out


if __name__ == "__main__":
    main()
