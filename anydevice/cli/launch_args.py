"""``anydevice run``'s command line: what to run (a script, ``-m module``, ``-- command``) and its checks.

    anydevice run [options] script.py [args...]
    anydevice run [options] -m module [args...]
    anydevice run [options] -- command [args...]

Everything after the script, the module name or ``--`` belongs to what runs, as with ``python``
(``anydevice run -n 2 -m pkg.train --help`` passes ``--help`` to ``pkg.train``). The multi-node
options are checked here, before any device is resolved or any rendezvous waits.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket

from anydevice.errors import DistributedError

# options of `anydevice run` that take a value (the splitter must skip the value, not take it for the script)
_VALUED = {"--role", "-n", "--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--max-restarts", "--run-id"}
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)
USAGE = "anydevice run [options] (script.py | -m module | -- command) [args ...]"
_WHOLE = re.compile(r"-?[0-9]+", flags=re.ASCII)


def whole_number(text: str) -> int:
    """A count or rank as written on the command line: ASCII digits only (``int()`` also reads ' 2', '٣' and '1_0')."""
    if not _WHOLE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number written with the ASCII digits 0-9")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    """The options of ``anydevice run``; :func:`parse` splits off what runs before argparse sees it."""
    p = argparse.ArgumentParser(
        prog="anydevice run",
        usage=USAGE,
        description="Launch N processes of a Python script or module the selected device's way (torchrun, spawn, ...), "
        "or start one console command (`-- vllm serve MODEL`) with the selected device's environment.",
    )
    p.add_argument(
        "-n", "--nproc-per-node", type=whole_number, default=None, help="processes on this node (default: the device count)"
    )
    p.add_argument("--nnodes", type=whole_number, default=1, help="number of nodes (default 1)")
    p.add_argument("--node-rank", type=whole_number, default=None, help="this node's rank, 0..nnodes-1 (static rendezvous)")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="rendezvous address every node can reach")
    p.add_argument("--max-restarts", type=whole_number, default=0, help="restart the whole group up to K times after a failure")
    p.add_argument(
        "--run-id", default=None, help="rendezvous id, the same on every node: letters, digits, - _ . (default: random)"
    )
    p.add_argument(
        "--cuda-compat",
        action="store_true",
        help="run a CUDA-written script unmodified: .cuda(), 'cuda' devices, torch.cuda.*, 'nccl' go to the selected device",
    )
    p.add_argument(
        "--role",
        default=None,
        help="run as this role: its device from ANYDEVICE_ROLES (trainer=xla,rollout=cpu), else ANYDEVICE; the roles' "
        "pairings are checked first",
    )
    p.add_argument("-m", dest="module", default=None, metavar="MODULE", help="run a module as `python -m MODULE` does")
    p.add_argument("script", nargs="?", default=None, help="the Python script to run")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script, module or command")
    p.set_defaults(command=None)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``anydevice run``'s arguments; sets exactly one of ``script``, ``module``, ``command``."""
    parser = build_parser()
    own, target = _split(argv)
    args = parser.parse_args(own)
    if target is None:
        if args.script is None and args.module is None:
            parser.error("say what to run: a script (script.py), a module (-m module) or a command (-- command)")
        return args
    kind, rest = target
    if kind == "--":
        if not rest:
            parser.error("`--` must be followed by the command to run, e.g. anydevice run -- vllm serve MODEL")
        args.command, args.script_args = rest, []
    else:
        args.module, args.script_args = rest[0], rest[1:]
    return args


def _split(argv: list[str]) -> tuple[list[str], tuple[str, list[str]] | None]:
    """``anydevice run``'s own options, and ``("-m", [module, *args])`` or ``("--", command)`` when given."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[:i], ("--", argv[i + 1 :])
        if arg == "-m":
            if i + 1 == len(argv):
                return argv, None  # argparse says "-m: expected one argument"
            return argv[:i], ("-m", argv[i + 1 :])
        if arg.startswith("-m") and not arg.startswith("--"):
            return argv[:i], ("-m", [arg[2:], *argv[i + 1 :]])  # -mpkg.mod, as python takes it
        if not arg.startswith("-") or arg == "-":
            return argv, None  # the script: argparse's REMAINDER keeps the rest for it
        i += 2 if arg in _VALUED else 1
    return argv, None


def check_rendezvous(nnodes: int, node_rank: int | None, endpoint: str | None, run_id: str | None) -> None:
    """Refuse multi-node options that could only fail later, after a wait (torch's rendezvous timeout is 600 s)."""
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise DistributedError(
            f"--node-rank {node_rank} is outside 0..{nnodes - 1} (--nnodes {nnodes}).",
            f"Give each node a distinct rank from 0 to {nnodes - 1}; node 0 is the one at --rdzv-endpoint.",
        )
    if nnodes > 1 and not endpoint:
        raise DistributedError(
            f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (a host every node can reach).",
            "Pass the same --rdzv-endpoint on every node, e.g. --rdzv-endpoint node0:29400.",
        )
    if endpoint is not None:
        split_endpoint(endpoint)
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise DistributedError(
            f"--run-id {run_id!r} may hold only letters, digits, '-', '_' and '.' (1 to 128 of them).",
            "Pass the same simple id on every node, e.g. --run-id job-7.",
        )


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[IPv6]:PORT`` for IPv6) as (host, port); a clear error for anything else."""
    fix = "Pass --rdzv-endpoint HOST:PORT with a port from 1 to 65535, e.g. node0:29400 or [fd00::1]:29400."
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host:
        raise DistributedError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT.", fix)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise DistributedError(f"--rdzv-endpoint {endpoint!r}: the port must be a number from 1 to 65535.", fix)
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise DistributedError(f"--rdzv-endpoint {endpoint!r}: {host} is not an IPv6 address.", fix) from None
        return host[1:-1], int(port_text)
    if ":" in host:
        raise DistributedError(f"--rdzv-endpoint {endpoint!r}: write an IPv6 host in brackets, [addr]:port.", fix)
    if not _HOSTNAME.fullmatch(host):
        raise DistributedError(f"--rdzv-endpoint {endpoint!r}: {host!r} is not a host name or IP address.", fix)
    try:
        socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM)
    except OSError as exc:
        raise DistributedError(f"--rdzv-endpoint {endpoint!r}: the host {host!r} does not resolve here ({exc}).", fix) from None
    return host, int(port_text)
