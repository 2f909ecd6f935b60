"""The plan's half of the check child (:mod:`anydevice.preflight.runner`): after the script's first step was observed,
plan that step (the observed model, its first inputs, the optimizer that updates it, the script's loss) for every
target, and write the plan into the observation's file. Started by ``anydevice plan`` through ``ANYDEVICE_PLAN``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "ANYDEVICE_PLAN"
"""The plan's options as JSON (``{"targets": [...], "mesh": ..., "price": ..., "budget": 8, "compose": null}``)."""


def requested() -> dict[str, Any] | None:
    """The plan's options when this child runs for ``anydevice plan``, else None."""
    text = os.environ.get(ENV)
    return json.loads(text) if text else None


def plan_observed(
    options: dict[str, Any], model: Any, args: Any, kwargs: Any, optimizer: Any, loss: Any, observation: Any, out: Path
) -> int:
    """Plan the observed step and write ``{...observation, "plan": ...}`` to ``out``; an error anydevice refuses is one line."""
    from anydevice.errors import AnyDeviceError
    from anydevice.planner.rows import plan_rows

    if kwargs:
        out.write_text(
            json.dumps(
                {
                    "error": "compile_refused",
                    "message": "anydevice plan takes a model called with positional "
                    "inputs only (the observed call had keyword arguments)",
                }
            )
        )
        return 3
    try:
        result = plan_rows(
            model,
            tuple(args),
            target=options["targets"],
            optimizer=optimizer,
            mesh=options.get("mesh"),
            price=options.get("price"),
            compose=options.get("compose"),
            budget=int(options.get("budget", 8)),
            loss=loss,
            observation=observation,
        )
    except AnyDeviceError as exc:
        out.write_text(json.dumps({"error": "compile_refused", "message": str(exc)}))
        return 3
    data = json.loads(observation.model_dump_json())
    data["plan"] = result
    out.write_text(json.dumps(data, default=str))
    return 0
