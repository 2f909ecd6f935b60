"""``anydevice matrix probe|render``: a thin command line over :func:`run_probes` and :func:`render`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anydevice matrix", description="The compatibility matrix.")
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="run the probe suite on the selected device (ANYDEVICE) and write JSON")
    probe.add_argument("--out", type=Path, default=None, help="result file to write (default: print a summary only)")
    probe.add_argument(
        "--only", default=None, metavar="PATTERN", help="comma-separated globs or substrings of probe names or shims"
    )
    probe.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds one probe may run (default 120)")
    probe.add_argument("--seed", type=int, default=0, help="RNG seed for every probe (default 0)")
    probe.add_argument("--simulated", action="store_true", default=None, help="mark results as against a simulated vendor module")
    probe.add_argument("--module", action="append", default=[], metavar="MOD", help="also load probes from MOD.PROBES")
    probe.add_argument("--list", action="store_true", help="list the probes that would run, and exit")
    render = sub.add_parser("render", help="merge result files into the matrix page (index.html + index.md)")
    render.add_argument("results", nargs="+", type=Path, metavar="RESULTS")
    render.add_argument("--out", type=Path, default=Path("site"), metavar="DIR", help="output directory (default site/)")
    render.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page on disk is stale")
    return parser


def main(argv: list[str]) -> int:
    """Entry point for ``anydevice matrix ...``; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "probe":
        return _probe(args, argv)
    return _render(args)


def _probe(args: argparse.Namespace, argv: list[str]) -> int:
    from anydevice.compat_matrix import catalog
    from anydevice.compat_matrix.runner import run_probes

    if args.list:
        problems: list[str] = []
        for probe in catalog.select(catalog.all_probes(problems, modules=args.module), args.only):
            print(f"{probe.group:<12} {probe.name:<34} {probe.description}")
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        return 0
    run = run_probes(
        args.out,
        only=args.only,
        timeout=args.timeout,
        seed=args.seed,
        simulated=args.simulated,
        argv=argv[1:],
        modules=args.module,
    )
    if not run.health.device_available:
        return 0  # an honest "device not here" result file is a successful run
    return 0 if run.health.sanity_passed else 1


def _render(args: argparse.Namespace) -> int:
    from anydevice.compat_matrix.site import build_site, check_site, write_site

    site = build_site(args.results)
    for problem in site.problems:
        print(f"error: {problem}", file=sys.stderr)
    if args.check:
        stale = check_site(site, args.out)
        for name in stale:
            print(f"stale: {args.out / name} differs from what the results render to", file=sys.stderr)
        if stale:
            print(
                "run: anydevice matrix render " + " ".join(str(p) for p in args.results) + f" --out {args.out}", file=sys.stderr
            )
        return 1 if stale else 0
    written = write_site(site, args.out)
    print(f"wrote {', '.join(str(p) for p in written)} from {site.run_count} run(s)")
    return 1 if site.problems and site.run_count == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
