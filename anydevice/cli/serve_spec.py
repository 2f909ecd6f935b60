"""``anydevice serve-spec``: an llm-d model server's overlay or endpoints entry for a role and device (pure text).

    anydevice serve-spec --engine vllm --role decode --device tpu:v6e-8
    anydevice serve-spec --role prefill --device cuda:h200x1 --pair cuda:h200x4 --format endpoints

``--device`` defaults to the role's device (``ANYDEVICE_ROLES=prefill=...,decode=...``, else ``ANYDEVICE``).
``--pair`` names the other role's device: the pairing is checked first, and a pairing llm-d refuses
(Mooncake with unequal TP, cross-vendor without host staging) is an error saying why.
"""

from __future__ import annotations

import argparse
import json
import sys

from anydevice.integrations import llmd
from anydevice.runtime.selection import example_ref


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="anydevice serve-spec", description=__doc__.split("\n")[0])
    p.add_argument("--engine", default="vllm", choices=("vllm",), help="the serving engine")
    p.add_argument("--role", required=True, choices=llmd.ROLES, help="the server's role in prefill/decode disaggregation")
    example = f"e.g. {example_ref()} or cpu; `anydevice list` names the devices, a wrong chip lists its chips"
    p.add_argument("--device", default=None, help=f"name[:chip-count], {example}")
    p.add_argument("--pair", default=None, metavar="DEVICE", help="the other role's device: check the pairing first")
    p.add_argument("--connector", default=None, choices=tuple(llmd.CONNECTORS), help="instead of the device's own KV connector")
    p.add_argument("--image", default=None, help="the container image instead of the declared one")
    p.add_argument("--format", default="kustomize", choices=("kustomize", "endpoints", "json"), help="what to print")
    p.add_argument("--address", default="127.0.0.1", help="the endpoints entry's address (--format endpoints)")
    return p


def main(argv: list[str]) -> int:
    """Print the spec; a refused pairing or an unknown device/chip is an error (exit 2)."""
    args = build_parser().parse_args(argv)
    spec = llmd.model_server(args.role, args.device, args.engine, connector=args.connector, image=args.image)
    if args.pair is not None:
        other = llmd.model_server(
            "decode" if args.role == "prefill" else "prefill", args.pair, args.engine, connector=args.connector
        )
        prefill, decode = (spec, other) if args.role == "prefill" else (other, spec)
        for warning in llmd.check_pair(prefill, decode):
            print(f"anydevice: warning: {warning}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(spec.as_dict(), indent=2))
    else:
        sys.stdout.write(spec.kustomize() if args.format == "kustomize" else spec.endpoint(args.address))
    return 0
