"""Shared by the benchmarks: rotated, interleaved rounds; median ratios with their spread; machine facts.

Every variant runs once per round, in an order that rotates by one place each round, so drift in
the machine's load (other jobs, thermal state, caches) falls on every variant alike. Ratios are
paired: each round's time of a variant divided by the same round's baseline, then summarised.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def prepare(
    ways: Mapping[str, Callable[[int, bool], Callable[..., float]]],
    modes: list[bool],
    steps: int,
    warmup: int,
    skip: Mapping[str, str] | None = None,
) -> tuple[dict[str, Callable[[], float]], dict[str, float]]:
    """Build every variant (``ways`` x eager/compiled ``modes``), run its ``warmup`` steps, time the setup.

    Returns the ready variants by label (``"name [eager]"``) and each one's setup seconds.
    """
    import time

    variants: dict[str, Callable[[], float]] = {}
    setup_s: dict[str, float] = {}
    for compiled in modes:
        for name, make in ways.items():
            if skip and name in skip:
                continue
            label = f"{name} [{'compiled' if compiled else 'eager'}]"
            start = time.perf_counter()
            run = make(steps, compiled)
            run(warmup)
            setup_s[label] = time.perf_counter() - start
            print(f"ready: {label} ({setup_s[label]:.1f} s)", file=sys.stderr, flush=True)
            variants[label] = run
    return variants, setup_s


def rotate(
    variants: Mapping[str, Callable[[], float]], rounds: int, log: bool = True, discard: int = 0
) -> dict[str, list[float]]:
    """Call every variant once per round, rotating the order; returns each variant's measurements.

    The first ``discard`` rounds run (in the same rotation) but are not recorded: a warm-up that
    catches what set-up left cold (lazy graphs of later steps, allocator growth).
    """
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(discard + rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        got = {name: variants[name]() for name in order}
        if r >= discard:
            for name in names:
                samples[name].append(got[name])
        if log:
            tag = f"warm-up round {r + 1}/{discard}" if r < discard else f"round {r + 1 - discard}/{rounds}"
            line = ", ".join(f"{n} {got[n]:.4g}" for n in names)
            print(f"[{tag}] {line}", file=sys.stderr, flush=True)
    return samples


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max and the interquartile range of ``values``."""
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1], "q1": q[0], "q3": q[2]}


def ratios(samples: Mapping[str, list[float]], base: str, names: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Per-round ratio of each variant to ``base`` (same round), summarised by :func:`spread`."""
    out = {}
    for name in names if names is not None else list(samples):
        paired = [v / b for v, b in zip(samples[name], samples[base])]
        out[name] = spread(paired)
    return out


def machine() -> dict[str, Any]:
    """What the numbers were measured on, including how loaded the machine was."""
    info: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def write(name: str, result: dict[str, Any], out: Path | None) -> Path:
    """Write ``result`` as indented JSON to ``out`` (default ``benchmarks/results/NAME.json``); raises
    :class:`~anydevice.errors.FileAccessError` where a file that is not a benchmark result is in the way."""
    from anydevice.files.safe_files import json_with, write_bytes

    path = out if out is not None else RESULTS / f"{name}.json"
    text = json.dumps(result, indent=2, sort_keys=False) + "\n"
    write_bytes(path, text.encode("utf-8"), ours=json_with(("benchmark",)))  # atomic; replaces only an earlier result
    print(f"wrote {path}", file=sys.stderr)
    return path
