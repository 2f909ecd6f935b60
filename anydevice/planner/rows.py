"""The plan's rows: one per target, compiled (TPU slices) or estimated (every other target), then time and cost."""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from anydevice.errors import AnyDeviceError
from anydevice.planner.blocks import Level, repeated_blocks
from anydevice.planner.declared import EFFICIENCY, PRICES, Declared, parse_prices
from anydevice.planner.search import COMPILED, Compiler, Outcome, Search, largest_batch, script_batch

if TYPE_CHECKING:
    from anydevice.runtime.selection import DeviceRef

ESTIMATE = "estimate, not compiled"
ARITHMETIC = "arithmetic from the catalogue (not compiled)"
COMPOSE_AT = 8
"""Blocks from which the plan composes 1- and 2-block compiles by default (the compile time grows with depth)."""


def plan_rows(
    model: Any,
    example_inputs: Any,
    *,
    target: str | list[str],
    optimizer: Any,
    mesh: Mapping[str, int] | None,
    price: Mapping[str, float] | str | None,
    compose: bool | None,
    budget: int,
    loss: Any = None,
    observation: Any = None,
) -> dict[str, Any]:
    """The plan (see :func:`anydevice.planner.plan`); ``loss`` and ``observation``: the check child's, for a script."""
    import torch

    from anydevice.preflight import refuse_closure_optimizer
    from anydevice.preflight.compiled import require_compiler, slice_compiler, split_target

    names = plan_targets(target)
    estimated = [t for t in names if split_target(t)[1] is None or slice_compiler(split_target(t)[0]) is None]
    require_compiler([t for t in names if t not in estimated])
    refuse_closure_optimizer(optimizer)
    prices = parse_prices(price) if isinstance(price, str) or price is None else dict(price)
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    work = copy.deepcopy(model).train()
    blocks = repeated_blocks(work)
    if compose is None:
        compose = blocks is not None and len(blocks[1]) >= COMPOSE_AT
    if compose and blocks is None:
        raise AnyDeviceError(
            "compose=True needs repeated blocks (an nn.ModuleList of one module type).", "Plan with compose=False."
        )
    meta = any(p.is_meta for p in itertools.chain(work.parameters(), work.buffers()))
    flops = step_flops(work, args)
    tokens = tokens_of(args)
    rows: list[dict[str, Any]] = []
    report = None
    if estimated and observation is not None:  # the check child: its observation of the script's step, judged here
        from anydevice.preflight import report as judged

        report = judged(observation, list(dict.fromkeys(split_target(t)[0] for t in estimated)))
    elif estimated:
        from anydevice.preflight import check

        devices = list(dict.fromkeys(split_target(t)[0] for t in estimated))  # the estimate is the device's, not the chip's
        report = check(model, example_inputs, target=devices, optimizer=optimizer, mesh=dict(mesh) if mesh else None)
    for name in names:
        if name in estimated:
            rows.append(estimate_row(name, report, flops, tokens, prices))
        else:
            start = 2 if blocks is not None and len(blocks[1]) >= 4 else 1  # the first block's program differs (measured)
            device, slice_name = split_target(name)
            compiler = Compiler(
                work, args, optimizer, slice_name or "", loss=loss, compose=compose, compose_from=start, device=device
            )
            rows.append(compiled_row(name, compiler, mesh, tokens, prices, budget))
    fitting = [r for r in rows if r["as_written"]["fits"] and r["cost"].get("usd_per_million_tokens") is not None]
    cheapest = min(fitting, key=lambda r: r["cost"]["usd_per_million_tokens"], default=None)
    del torch
    return {
        "targets": rows,
        "cheapest": None if cheapest is None else cheapest["target"],
        "cheapest_note": "among the targets whose script as written fits, at the expected step time and declared price",
        "model": {
            "class": type(model).__name__,
            "parameters": sum(p.numel() for p in work.parameters()),
            "meta": meta,
            "repeated_blocks": None if blocks is None else {"name": blocks[0], "count": len(blocks[1])},
        },
        "step_flops_torch": flops,
        "tokens_per_replica_step": tokens,
        "composed": compose,
    }


def plan_targets(target: str | list[str]) -> list[str]:
    """Canonical targets: a TPU slice as check names it (``tpu:v5e-8``); a GPU or Trainium as its chip and count
    (``cuda:h100x8``: no compiler, so an estimate row); a bare device (``cuda``) as itself."""
    from anydevice.preflight import targets_of
    from anydevice.preflight.compiled import slice_compiler
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import parse_ref

    names = [t.strip() for t in (target.split(",") if isinstance(target, str) else target) if t.strip()]
    out: list[str] = []
    for name in names:
        ref = parse_ref(name, get_registry())
        if slice_compiler(ref.name) is None and ref.chip is not None:
            out.append(f"{ref.name}:{ref.chip.name}x{ref.count or 1}")
        else:
            out += targets_of([name])
    return list(dict.fromkeys(out)) or targets_of(names)


def compiled_row(
    name: str, compiler: Compiler, mesh: Mapping[str, int] | None, tokens: dict[str, Any], prices: dict[str, float], budget: int
) -> dict[str, Any]:
    """One TPU slice: the step as written, the batch / checkpointing / sharding that fit, time and cost."""
    from anydevice.runtime.selection import parse_ref

    slice_ = parse_ref(name)  # the one grammar: the chip from its plugin's catalogue, the count and its shape
    chip = slice_.chip
    if chip is None:
        raise AnyDeviceError(f"{name}: a compiled plan needs a chip and a count ({slice_.name}:CHIP-COUNT).")
    first = compiler.outcome(compiler.batch, "none", mesh)
    row: dict[str, Any] = {
        "target": name,
        "compiler": first.raw.get("compiler") or first.raw.get("first", {}).get("compiler"),
    }
    row["as_written"] = _said(first)
    fit: dict[str, Any] = {}
    search = largest_batch(compiler, first, mesh, budget)
    fit["batch"] = _search(search)
    fitting: list[Outcome] = [first] if first.fits else []
    if first.fits:
        fit["checkpointing"] = {"level": "none", "compiles": 0, "seconds": 0.0, "change": None, "note": "fits as written"}
        fit["sharding"] = {"mesh": first.mesh, "compiles": 0, "seconds": 0.0, "change": None, "note": "fits as written"}
    else:
        fit["checkpointing"] = _lightest_checkpointing(compiler, mesh, fitting)
        fit["sharding"] = _sharded(compiler, mesh, first, fitting)
        if not fitting and fit["batch"]["found"] is None:
            fit["refusal"] = _refusal(compiler, slice_)
    row["fit"] = fit
    at_found = [o for o in search.tried if o.fits and o.batch == search.found]
    best = fitting[0] if fitting else at_found[0] if at_found else None  # else the largest batch that fits
    row["time"] = compiled_time(best, chip, tokens, compiler.batch)
    row["cost"] = cost(row["time"], chip.name, prices)
    return row


def _said(o: Outcome) -> dict[str, Any]:
    verdict = "fits" if o.fits else "will not fit" if o.fits is False else "unknown"
    return {
        "verdict": verdict,
        "fits": o.fits,
        "per_chip_bytes": o.per_chip_bytes,
        "capacity_bytes": o.capacity_bytes,
        "batch": o.batch,
        "mesh": o.mesh,
        "checkpointing": o.level,
        "evidence": o.evidence,
        "compiles": o.compiles,
        "seconds": o.seconds,
        "error": o.error,
    }


def _search(s: Search) -> dict[str, Any]:
    return {
        "found": s.found,
        "tried": [(o.batch, o.fits) for o in s.tried],
        "compiles": s.compiles,
        "seconds": s.seconds,
        "change": s.change,
        "note": s.note,
        "evidence": s.tried[0].evidence if s.tried else None,
    }


def _lightest_checkpointing(compiler: Compiler, mesh: Mapping[str, int] | None, fitting: list[Outcome]) -> dict[str, Any]:
    started, before = time.perf_counter(), compiler.compiles
    tried = []
    levels: tuple[Level, ...] = ("blocks", "layers")
    for level in levels:
        if level == "blocks" and repeated_blocks(compiler.model) is None:
            continue
        out = compiler.outcome(compiler.batch, level, mesh)
        tried.append((level, out.fits, out.per_chip_bytes))
        if out.fits:
            fitting.append(out)
            change = "ad.checkpoint_blocks(model)" if level == "blocks" else 'ad.checkpoint_blocks(model, level="layers")'
            return {
                "level": level,
                "tried": tried,
                "compiles": compiler.compiles - before,
                "seconds": round(time.perf_counter() - started, 2),
                "change": change,
                "evidence": out.evidence,
            }
    return {
        "level": None,
        "tried": tried,
        "compiles": compiler.compiles - before,
        "change": None,
        "seconds": round(time.perf_counter() - started, 2),
        "note": "no checkpointing level fits at the script's batch",
    }


def _sharded(compiler: Compiler, mesh: Mapping[str, int] | None, first: Outcome, fitting: list[Outcome]) -> dict[str, Any]:
    if mesh and "fsdp" in mesh:
        return {"mesh": dict(mesh), "compiles": 0, "seconds": 0.0, "change": None, "note": "already fully sharded"}
    out = compiler.outcome(compiler.batch, "none", {"fsdp": -1})
    if out.fits:
        fitting.append(out)
    change = "--mesh fsdp=-1 (ad.plan/check: mesh={'fsdp': -1})" if out.fits else None
    return {
        "mesh": out.mesh,
        "fits": out.fits,
        "per_chip_bytes": out.per_chip_bytes,
        "compiles": out.compiles,
        "seconds": out.seconds,
        "change": change,
        "evidence": out.evidence,
    }


def _refusal(compiler: Compiler, slice_: DeviceRef) -> dict[str, Any]:
    """Batch 1, every layer checkpointed, fully sharded: if that does not fit, the smallest slice of the generation that
    would by arithmetic (per-chip bytes falling as 1/chips: a lower bound, since activations do not shard)."""
    out = compiler.outcome(1, "layers", {"fsdp": -1})
    said: dict[str, Any] = {"batch_1_layers_fsdp": _said(out)}
    if out.fits:
        said["message"] = "fits at batch 1 with every layer checkpointed and fully sharded state"
        return said
    chip, chips = slice_.chip, slice_.shape.chips if slice_.shape is not None else None
    assert chip is not None and chips is not None, slice_  # a compiled row's target names a chip and a count
    needed, capacity = out.per_chip_bytes, out.capacity_bytes or chip.hbm_bytes
    larger = None
    if needed and capacity:
        for shape in chip.shapes:
            if shape.chips > chips and needed * chips / shape.chips <= capacity:
                larger = f"{slice_.name}:{chip.name}-{chip.count_of(shape)}"
                break
    said["message"] = f"does not fit {slice_.slice_name} at batch 1 with every layer checkpointed and fully sharded state" + (
        f"; the smallest {chip.name} slice that would: {larger}" if larger else f"; no {chip.name} slice would"
    )
    said["smallest_slice"] = larger
    said["evidence"] = ARITHMETIC + ": per-chip bytes taken to fall as 1/chips under fsdp (activations do not: optimistic)"
    return said


def compiled_time(best: Outcome | None, chip: Any, tokens: dict[str, Any], script_batch_: int) -> dict[str, Any]:
    """Flops and bytes accessed per chip from the compiled program's cost analysis, over the catalogue's peak and HBM
    bandwidth (the roofline bound), the collectives over the interconnect, and the expected time at the declared MFU."""
    if best is None or not best.cost.get("flops"):
        return {"note": "no configuration tried fits: no compiled program to time"}
    per_step_tokens = tokens["count"] * best.batch // max(script_batch_, 1)
    counts = "estimate from the compiler's counts" + (" (composed)" if best.evidence != COMPILED else "")
    out = timing(best.cost["flops"], best.cost.get("bytes accessed"), chip, per_step_tokens, tokens["unit"], counts)
    out["configuration"] = {"batch": best.batch, "checkpointing": best.level, "mesh": best.mesh}
    coll = sum(best.collective_bytes.values())
    if chip.interconnect_bandwidth and best.collective_bytes:
        out["interconnect_seconds"] = coll / chip.interconnect_bandwidth
    out["collective_bytes"] = best.collective_bytes
    out["interconnect_evidence"] = (
        f"the collectives' result bytes in the compiled HLO over the declared interconnect ({chip.source}, {chip.as_of})"
        if chip.interconnect_bandwidth
        else "interconnect bandwidth not declared for this chip: unknown"
    )
    if "interconnect_seconds" in out and out.get("expected_seconds"):
        out["expected_seconds"] = max(out["expected_seconds"], out["interconnect_seconds"])
    optimal = best.cost.get("optimal_seconds")
    bound = out.get("roofline_seconds")
    if optimal is None:
        out["optimal_seconds"] = {"value": None, "used": False, "reason": "the compiler gave none"}
    elif optimal <= 0:
        out["optimal_seconds"] = {
            "value": optimal,
            "used": False,
            "reason": f"ignored: negative ({optimal:.3g} s; libtpu 0.0.42.1 returns negative values)",
        }
    elif bound and 0.5 <= optimal / bound <= 2:
        out["optimal_seconds"] = {"value": optimal, "used": True, "reason": "positive and within 2x of the roofline bound"}
    else:
        ratio = f"{optimal / bound:.3g}x" if bound else "no roofline to compare"
        out["optimal_seconds"] = {"value": optimal, "used": False, "reason": f"ignored: {ratio} the roofline bound"}
    return out


def timing(flops: float, accessed: float | None, chip: Any, tokens: int, unit: str, evidence: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "flops": flops,
        "bytes_accessed": accessed,
        "evidence": evidence,
        "tokens_per_step": tokens,
        "unit": unit,
    }
    peak, bandwidth = chip.peak_bf16, chip.hbm_bandwidth
    out["peaks"] = f"declared: {chip.source}, {chip.as_of} (bf16 {peak or 0:.3g} FLOP/s, HBM {bandwidth or 0:.3g} B/s)"
    if not peak:
        out["note"] = "the chip declares no bf16 peak: no time"
        return out
    compute = flops / peak
    memory = accessed / bandwidth if accessed and bandwidth else 0.0
    out["roofline_seconds"] = max(compute, memory)
    out["bound_by"] = "compute" if compute >= memory else "HBM bandwidth"
    out[f"{unit}_per_second_per_chip_at_bound"] = tokens / out["roofline_seconds"] if out["roofline_seconds"] else None
    efficiency: Declared | None = EFFICIENCY.get(chip.name)
    if efficiency is not None:
        out["efficiency"] = {"value": efficiency.value, "evidence": efficiency.said()}
        out["expected_seconds"] = max(compute / efficiency.value, memory)
        out[f"{unit}_per_second_per_chip_expected"] = tokens / out["expected_seconds"]
    else:
        out["efficiency"] = {"value": None, "evidence": "no efficiency declared for this chip: no expected time"}
    return out


def cost(time_: dict[str, Any], chip: str, prices: dict[str, float]) -> dict[str, Any]:
    declared = PRICES.get(chip)
    if chip in prices:
        usd, said = prices[chip], "given (--price)"
    elif declared is not None:
        usd, said = declared.value, declared.said()
    else:
        return {"usd_per_chip_hour": None, "evidence": f"no price declared for {chip}: give one (--price {chip}=USD)"}
    out: dict[str, Any] = {"usd_per_chip_hour": usd, "evidence": said}
    seconds, tokens = time_.get("expected_seconds"), time_.get("tokens_per_step")
    if seconds and tokens:
        out["usd_per_million_tokens"] = usd * seconds / 3600 / tokens * 1e6
        out["at"] = f"the expected step time, {tokens:,} {time_['unit']} per chip per step"
    return out


def estimate_row(name: str, report: Any, flops: int, tokens: dict[str, Any], prices: dict[str, float]) -> dict[str, Any]:
    """A target without a compiler here (cuda, neuron, or a TPU without a slice): the CPU estimate's memory and torch's
    flop counter over the declared peak, every cell labelled "estimate, not compiled"."""
    from anydevice.preflight.compiled import split_target
    from anydevice.runtime.registry import get_registry

    device, variant = split_target(name)
    entry = report.targets[[t.target for t in report.targets].index(device)]
    memory = report.observation.memory
    per_chip = None
    if memory is not None:
        per_chip = memory.parameters + memory.gradients + memory.optimizer_state + memory.activations
    chips = get_registry().get(device).spec.chips
    from anydevice.contract.chips import parse_variant

    chip = parse_variant(tuple(chips), variant, device)[0] if variant else None
    capacity = chip.hbm_bytes if chip is not None else None
    fits = None if per_chip is None or capacity is None else per_chip <= capacity
    row: dict[str, Any] = {"target": name, "compiler": None}
    row["as_written"] = {
        "verdict": "unknown" if fits is None else "fits" if fits else "will not fit",
        "check_verdict": entry.verdict,
        "fits": fits,
        "per_chip_bytes": per_chip,
        "capacity_bytes": capacity,
        "evidence": ESTIMATE + " (the CPU step's parameters, gradients, optimizer state and saved activations; "
        "capacity: the catalogue's HBM)",
    }
    fit: dict[str, Any] = {}
    if per_chip is not None and capacity and memory is not None and memory.activations:
        static = per_chip - memory.activations
        batch = tokens["batch"]
        largest = int((capacity - static) // (memory.activations / batch)) if capacity > static else 0
        fit["batch"] = {
            "found": largest or None,
            "compiles": 0,
            "seconds": 0.0,
            "evidence": ESTIMATE + " (arithmetic: activations linear in the batch)",
            "change": f"per-chip batch {largest}" if largest else None,
        }
    row["fit"] = fit
    if chip is None:
        row["time"], row["cost"] = {"note": "no chip named: no peak"}, {"usd_per_chip_hour": None}
        return row
    row["time"] = timing(float(flops), None, chip, tokens["count"], tokens["unit"], ESTIMATE + " (torch.utils.flop_counter)")
    row["cost"] = cost(row["time"], chip.name, prices)
    row["cost"]["evidence"] += "; time: " + ESTIMATE
    return row


def step_flops(model: Any, args: tuple[Any, ...]) -> int:
    """Flops of one forward and backward of the summed output, by ``torch.utils.flop_counter`` on meta copies."""
    import torch
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import FlopCounterMode

    shadow = copy.deepcopy(model).to("meta")
    inputs = tree_map(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, args)
    with FlopCounterMode(display=False) as counter:
        out = shadow(*inputs)
        leaves = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
        total = sum(t.float().sum() for t in leaves if t.requires_grad)
        if isinstance(total, torch.Tensor):
            torch.autograd.backward(total)
    return int(counter.get_total_flops())


def tokens_of(args: tuple[Any, ...]) -> dict[str, Any]:
    """What one replica's step processes: tokens (an integer input of shape batch x sequence) or samples."""
    import torch
    from torch.utils._pytree import tree_leaves

    batch = script_batch(args)
    ids = next((t for t in tree_leaves(args) if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dim() >= 2), None)
    if ids is not None:
        return {"count": int(ids.shape[0] * ids.shape[1]), "unit": "tokens", "batch": batch}
    return {"count": batch, "unit": "samples", "batch": batch}
