"""``anydevice matrix probe|render``: a thin command line over :func:`run_probes` and :func:`render`.

Every option value is checked before any work starts; a bad one is a one-sentence error (exit 2).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from anydevice.compat_matrix.probe import COMPILE_GROUP, EXPORT_TARGETS, TARGET_GROUPS

MAX_TIMEOUT = 24 * 3600.0


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(f"{text} is not a usable timeout: give seconds above 0 and at most {MAX_TIMEOUT:.0f}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text} is out of range: give a seed from 0 to 2**63-1")
    return value


def _only(text: str) -> str:
    if not any(p.strip() for p in text.split(",")):
        raise argparse.ArgumentTypeError("is empty: give probe names, shims or globs (see `anydevice matrix probe --list`)")
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anydevice matrix", description="The compatibility matrix.")
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser(
        "probe",
        help="run the probe suite on the selected device (ANYDEVICE) and write JSON",
    )
    probe.add_argument(
        "--out", type=Path, default=None, metavar="FILE", help="result file to write (default: none, print a summary only)"
    )
    probe.add_argument(
        "--only",
        type=_only,
        default=None,
        metavar="PATTERN",
        help="comma-separated globs or substrings of probe names or groups (default: every probe)",
    )
    probe.add_argument(
        "--timeout", type=_timeout, default=120.0, metavar="S", help="seconds one probe may run, above 0 (default: 120)"
    )
    probe.add_argument("--seed", type=_seed, default=0, help="RNG seed for every probe (default: 0)")
    probe.add_argument(
        "--simulated",
        action="store_true",
        default=None,
        help="mark results as against a simulated vendor module (default: what the plugin declares)",
    )
    probe.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="MOD",
        help="also load probes from MOD.PROBES (repeatable; default: none)",
    )
    probe.add_argument(
        "--target",
        default=None,
        metavar="TARGET",
        help="an export target (" + ", ".join(sorted(EXPORT_TARGETS)) + "): run its export probes (convert, run in its "
        "interpreter, compare) on the host CPU; or a slice (DEVICE:CHIP-COUNT): compile the compile probes' training steps for "
        "it with its vendor's compiler on the host CPU, never run (default: the device's probes)",
    )
    probe.add_argument("--list", action="store_true", help="list the probes that would run, and exit")
    probe.add_argument("--force", action="store_true", help="replace --out even when it is not an earlier result file")
    render = sub.add_parser(
        "render",
        help="merge result files into the matrix page (index.html + index.md)",
    )
    render.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS",
        help="result files written by `anydevice matrix probe --out` (a directory stands for its *.json)",
    )
    render.add_argument(
        "--out", type=Path, default=Path("site"), metavar="DIR", help="output directory, created if missing (default: site/)"
    )
    render.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page on disk is stale")
    render.add_argument(
        "--force",
        action="store_true",
        help="replace index.html and index.md in --out even when render did not write them (a hand-written file, a link: "
        "the link itself is replaced, never what it points to)",
    )
    return parser


def main(argv: list[str]) -> int:
    """Entry point for ``anydevice matrix ...``; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "probe":
        if args.out is not None and args.out.is_dir():
            parser.error(f"--out {args.out} is a directory: give the result file to write, e.g. {args.out / 'results.json'}")
        return _probe(args, argv)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file: give the directory to write index.html and index.md into")
    return _render(args)


def _probe(args: argparse.Namespace, argv: list[str]) -> int:
    from anydevice.compat_matrix import catalog
    from anydevice.compat_matrix.runner import run_probes

    problems: list[str] = []
    every = catalog.all_probes(problems, modules=args.module)
    chosen = catalog.select(every, args.only, args.target)
    for problem in problems:  # a plugin whose probe hook failed or hung is named, with or without --list
        print(f"warning: {problem}", file=sys.stderr)
    if args.list:
        for probe in chosen:
            print(f"{probe.group:<12} {probe.name:<34} {probe.description}")
        return 0
    if args.only is not None and not any(catalog.matches(p.name, p.group, args.only) for p in chosen):
        elsewhere = sorted(
            {
                f"{p.group} probes run with --target {p.params.get('target')}" + (":SLICE" if p.group == COMPILE_GROUP else "")
                for p in every
                if p.group in TARGET_GROUPS and catalog.matches(p.name, p.group, args.only)
            }
        )
        where = "".join(f"; {line}" for line in elsewhere) if args.target is None else ""
        print(
            f"error: --only {args.only!r} matches no probe{where}; `anydevice matrix probe --list` shows their names and groups",
            file=sys.stderr,
        )
        return 2
    run = run_probes(
        args.out,
        only=args.only,
        timeout=args.timeout,
        seed=args.seed,
        simulated=args.simulated,
        argv=argv[1:],
        modules=args.module,
        force=args.force,
        target=args.target,
    )
    if not run.health.device_available:
        return 0  # an honest "device not here" result file is a successful run
    return 0 if run.health.sanity_passed else 1


def _expand(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    return files


def _render(args: argparse.Namespace) -> int:
    from anydevice.compat_matrix.page import build_site, check_site, write_site
    from anydevice.errors import FileAccessError

    results = _expand(args.results)
    site = build_site(results)
    for problem in site.problems:
        print(f"error: {problem}", file=sys.stderr)
    for cut in site.cuts:
        print(f"note: cut to fit the page: {cut}", file=sys.stderr)
    if site.run_count == 0:
        print(
            f"error: none of the {len(results)} result file(s) given is valid: nothing rendered, {args.out} left as it was",
            file=sys.stderr,
        )
        return 1
    if args.check:
        stale = check_site(site, args.out)
        for name in stale:
            print(f"stale: {args.out / name} differs from what the results render to", file=sys.stderr)
        if stale:
            print(
                "run: anydevice matrix render " + " ".join(str(p) for p in args.results) + f" --out {args.out}", file=sys.stderr
            )
        return 1 if stale else 0
    try:
        written = write_site(site, args.out, force=args.force)
    except FileAccessError as exc:
        print(f"error: {exc.message}" + (f"\n{exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    skipped = f"; skipped {len(site.problems)} file(s) named above" if site.problems else ""
    skipped += f"; cut {len(site.cuts)} file(s) to fit the page, named above" if site.cuts else ""
    print(f"wrote {', '.join(str(p) for p in written)} from {site.run_count} run(s){skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
