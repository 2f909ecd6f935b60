"""``anydevice export CHECKPOINT_OR_SCRIPT --target litert --out FILE``: ``ad.export`` from the command line.

The model comes from a script that defines ``anydevice_export(checkpoint)`` returning ``(model,
example_inputs)``: given a script, it is called with ``None``; given a checkpoint file (``ad.save``),
the checkpoint is loaded with ``ad.load`` and passed to the hook of the script named by ``--script``
(``examples/train.py`` for the main job's checkpoints). A model that cannot convert exits 2 with what
could not convert printed as ``anydevice check`` prints a finding (:mod:`anydevice.preflight.text`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from anydevice.edge.script import HOOK, load_model
from anydevice.errors import ExportError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="anydevice export",
        description="Convert a model for an edge runtime, check it against PyTorch, write the file atomically.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("source", type=Path, metavar="CHECKPOINT_OR_SCRIPT", help=f"a .py defining {HOOK}(), or an ad.save file")
    parser.add_argument("--target", choices=("litert",), default="litert", help="the edge runtime")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the file to write (e.g. model.tflite)")
    parser.add_argument(
        "--script", type=Path, metavar="PY", help=f"with a checkpoint: the script whose {HOOK}(checkpoint) builds the model"
    )
    parser.add_argument(
        "--quantize", metavar="RECIPE", help="int8, int8_weight_only, fp16 or a litert-torch recipe name (default: float32)"
    )
    parser.add_argument("--json", action="store_true", help="print what was exported as JSON")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    from anydevice.edge.api import check_destination

    check_destination(args.out)  # before the script runs: a FIFO or a pipe (/dev/stdout) is refused, never opened
    model, example_inputs = load_model(args.source, args.script)
    from anydevice.edge import export

    try:
        exported = export(model, example_inputs, target=args.target, path=args.out, quantize=args.quantize)
    except ExportError as exc:
        if exc.finding is None:
            raise
        print(refusal(exc, args.target, as_json=args.json), file=sys.stdout if args.json else sys.stderr)
        return 2
    if args.json:
        print(json.dumps(exported.as_dict(), indent=2, sort_keys=True))
    else:
        print(exported.summary())
    return 0


def refusal(error: ExportError, target: str, *, as_json: bool = False) -> str:
    """What could not convert, printed as ``anydevice check`` prints a finding (``--json``: its schema's fields)."""
    from anydevice.preflight.schema import Finding
    from anydevice.preflight.text import findings_block

    finding = error.finding
    assert isinstance(finding, Finding), "export refusals carry check's finding"
    if as_json:
        return json.dumps({"target": target, "written": False, "findings": [finding.model_dump()]}, indent=2)
    head = f"anydevice export: {target}: WILL NOT CONVERT (nothing was written)"
    return "\n".join([head, *findings_block([finding])])
