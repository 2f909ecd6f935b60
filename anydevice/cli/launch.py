"""``anydevice run``: launch N processes of a script the selected device's way.

    anydevice run [-n N] [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT] [--max-restarts K] [--cuda-compat]
                  script.py [args...]

The parent resolves ``ANYDEVICE`` by cheap detection (no unselected vendor package is imported:
torch's backend autoload is turned off for the children where the selection does not need it),
loads the selected plugin's shims and hands a :class:`LaunchSpec` to its launcher:

the Collectives shim's ``launch(spec) -> int`` (declared in ``anydevice.shims.contracts``). The
shared shims run the entry of :data:`LAUNCHERS` that ``collectives.launcher`` names: ``"torchrun"``
(torch elastic, one fresh interpreter per rank) or ``"spawn"`` (torch elastic, ranks started by
multiprocessing spawn; TorchTPU sets ``set_tpu_launch_env`` in the parent through ``launch_env``)
or ``"single-process"`` (one rank only, e.g. mps). :func:`register_launcher` adds more; a device
that launches its own way implements ``launch`` itself.

Both built-in launchers run on torch elastic (``torch.distributed.launcher.api``): a failing rank
stops the others at once, the run exits non-zero and shows that rank's traceback, and
``--max-restarts`` restarts the whole group (``TORCHELASTIC_RESTART_COUNT`` counts attempts).
Every child gets ``ANYDEVICE`` set to the device the parent resolved, plus the shim's
``launch_env(local_rank, local_world_size)`` (e.g. ``NEURON_RT_VISIBLE_CORES``) set before
its interpreter imports anything.

Lifetime (:mod:`anydevice.cli.lifeline`): every rank dies with the launcher, also when it is killed with
SIGKILL; Ctrl-C (SIGINT) stops every rank and the run ends with one line on stderr and status 130.
``-n`` is checked against what the device takes (:func:`check_nproc`) before anything is planned.
``--cuda-compat`` runs CUDA-written scripts unmodified (:mod:`anydevice.cuda_compat` in every rank).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import runpy
import signal
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice import autoload, settings
from anydevice.cli import lifeline
from anydevice.errors import DistributedError

if TYPE_CHECKING:
    from anydevice.device_spec import Detection, DeviceSpec

_RANK_FLAG = "--as-rank"
PROCESSES_PER_CORE = 4
"""``-n`` bound where the device's count does not bound it (the host, a device of unknown count)."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs: what to run, how many ranks, rendezvous and environments."""

    script: str
    script_args: tuple[str, ...] = ()
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    max_restarts: int = 0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    env: Mapping[str, str] = field(default_factory=dict)
    """Set in every child (``ANYDEVICE``, ``TORCH_DEVICE_BACKEND_AUTOLOAD``, ...)."""
    rank_env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    """Extra variables per local rank, from the Collectives shim's ``launch_env``."""


Launcher = Callable[[LaunchSpec], int]


def _rendezvous(spec: LaunchSpec) -> tuple[str, str, dict[str, Any], str | None]:
    """(backend, endpoint, configs, local_addr) for torch elastic."""
    if spec.nnodes == 1 and not spec.rdzv_endpoint:
        return "c10d", "127.0.0.1:0", {}, "127.0.0.1"  # what torchrun --standalone does, on loopback
    if not spec.rdzv_endpoint:
        raise DistributedError(
            f"--nnodes {spec.nnodes} needs --rdzv-endpoint HOST:PORT (a host every node can reach).",
            "Pass the same --rdzv-endpoint on every node, e.g. --rdzv-endpoint node0:29400.",
        )
    if spec.node_rank is not None:
        return "static", spec.rdzv_endpoint, {"rank": spec.node_rank}, None
    return "c10d", spec.rdzv_endpoint, {}, None


def _elastic(spec: LaunchSpec, entrypoint: Callable[..., Any] | str, args: Sequence[Any], start_method: str) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    backend, endpoint, configs, local_addr = _rendezvous(spec)
    config = LaunchConfig(
        min_nodes=spec.nnodes,
        max_nodes=spec.nnodes,
        nproc_per_node=spec.nproc_per_node,
        run_id=spec.run_id,
        rdzv_backend=backend,
        rdzv_endpoint=endpoint,
        rdzv_configs=configs,
        max_restarts=spec.max_restarts,
        start_method=start_method,
        local_addr=local_addr,
    )
    with _environment(spec.env), _quiet_signal_relay():
        try:
            elastic_launch(config, entrypoint)(*args)
        except SignalException as exc:
            return _interrupted(signal.Signals(exc.sigval))
        except ChildFailedError as exc:
            rank, failure = exc.get_first_failure()
            if all(f.exitcode in (lifeline.INTERRUPTED, -signal.SIGINT) for f in exc.failures.values()):
                return _interrupted(signal.SIGINT)  # Ctrl-C reached the ranks before the launcher
            sys.stderr.write(str(exc.format_msg()) + "\n")  # type: ignore[no-untyped-call]
            sys.stderr.write(f"anydevice run: rank {rank} failed (exit code {failure.exitcode}); the run was stopped.\n")
            return failure.exitcode if failure.exitcode > 0 else 1
        except RendezvousError as exc:
            raise DistributedError(
                f"The ranks could not meet at the rendezvous {endpoint}: {exc}",
                "Check --rdzv-endpoint, --nnodes and that every node runs the same command.",
            ) from exc
    return 0


# torch elastic's loggers that announce relaying a signal to the ranks (the launcher says it in one line)
_RELAY_LOGGERS = ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api")


class _DropSignalRelay(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or "signal" not in record.getMessage()


@contextmanager
def _quiet_signal_relay() -> Iterator[None]:
    quiet = _DropSignalRelay()
    loggers = [logging.getLogger(name) for name in _RELAY_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _interrupted(sig: signal.Signals) -> int:
    """The one line a stopped run ends with; the shell's status for that signal (130 for SIGINT)."""
    sys.stderr.write(f"anydevice run: interrupted by {sig.name}; every rank was stopped.\n")
    return 128 + int(sig)


def torchrun(spec: LaunchSpec) -> int:
    """torch elastic (torchrun's engine): each rank is a fresh interpreter running the script."""
    args = ["-m", "anydevice.cli.launch", _RANK_FLAG, json.dumps({str(k): dict(v) for k, v in spec.rank_env.items()})]
    return _elastic(spec, sys.executable, [*args, "--", spec.script, *spec.script_args], "spawn")


def spawn(spec: LaunchSpec) -> int:
    """torch elastic with ranks started by multiprocessing spawn (TorchTPU's way).

    The environment the parent holds when this is called (e.g. what ``set_tpu_launch_env`` set)
    is inherited; per-rank variables are set before the script runs, after torch is imported.
    """
    rank_env = {k: dict(v) for k, v in spec.rank_env.items()}
    return _elastic(spec, run_script, [spec.script, list(spec.script_args), rank_env], "spawn")


def single_process(spec: LaunchSpec) -> int:
    """For devices one process drives alone (``mps``): one rank through torchrun, more is an error."""
    if spec.nproc_per_node * spec.nnodes > 1:
        raise DistributedError(
            f"The selected device runs one process per machine; {spec.nproc_per_node * spec.nnodes} were asked for.",
            "Run with -n 1 (or plain python), or select a device with a multi-process launcher (cpu, cuda, ...).",
        )
    return torchrun(spec)


# --- Integrations hook (anydevice.integrations): libraries that pick a device on their own. -------------
# Hugging Face Transformers/Accelerate read their device choice from the environment at import: the parent adds
# the variables each integration computes for the selected device (anydevice.integrations) to every child's environment; each
# rank installs an import hook (it imports nothing) that fixes Trainer's optimizer where the device rejects it.


def _integrations_env(backend: Any) -> dict[str, str]:
    from anydevice.integrations import launch_environment

    return launch_environment(backend)


def _integrations_hook() -> None:
    from anydevice.integrations import _hf

    _hf.install_import_hook()


# --- end of the integrations hook ------------------------------------------------------------------------

LAUNCHERS: dict[str, Launcher] = {"torchrun": torchrun, "spawn": spawn, "single-process": single_process}


def register_launcher(name: str, launcher: Launcher) -> None:
    """Make ``launcher`` available to Collectives shims that declare ``launcher = name``."""
    LAUNCHERS[name] = launcher


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` (what the children inherit) and restore it afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def run_script(script: str, script_args: list[str], rank_env: Mapping[int, Mapping[str, str]]) -> None:
    """Run ``script`` as ``__main__`` in this rank, after applying its local rank's environment."""
    lifeline.die_with_parent()
    local = int(settings.LOCAL_RANK.get() or 0)
    os.environ.update(rank_env.get(local, {}))
    _integrations_hook()
    path = Path(script)
    sys.argv = [script, *script_args]
    sys.path[0] = str(path.resolve().parent)  # as `python script.py` would
    with lifeline.quiet_interrupt():
        if settings.ANYDEVICE_CUDA_COMPAT.flag():
            import anydevice.cuda_compat  # noqa: F401 - redirects CUDA calls before the script runs
        runpy.run_path(str(path), run_name="__main__")


def _rank_main(argv: list[str]) -> int:
    """Child side of :func:`torchrun`: apply the rank's environment, then run the script under ``@record``."""
    lifeline.die_with_parent()  # first: before torch is imported
    rank_env = {int(k): v for k, v in json.loads(argv[0]).items()}
    rest = argv[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    local = int(settings.LOCAL_RANK.get() or 0)
    os.environ.update(rank_env.get(local, {}))  # before torch (and any vendor) is imported
    with lifeline.quiet_interrupt():
        from torch.distributed.elastic.multiprocessing.errors import record

        record(run_script)(rest[0], rest[1:], {})
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anydevice run",
        description="Launch N processes of a script the selected device's way (torchrun, spawn, ...).",
    )
    p.add_argument("-n", "--nproc-per-node", type=int, default=None, help="processes on this node (default: the device count)")
    p.add_argument("--nnodes", type=int, default=1, help="number of nodes (default 1)")
    p.add_argument("--node-rank", type=int, default=None, help="this node's rank (static rendezvous at --rdzv-endpoint)")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="rendezvous address every node can reach")
    p.add_argument("--max-restarts", type=int, default=0, help="restart the whole group up to K times after a failure")
    p.add_argument("--run-id", default=None, help="rendezvous id, the same on every node (default: random)")
    p.add_argument(
        "--cuda-compat",
        action="store_true",
        help="run a CUDA-written script unmodified: .cuda(), 'cuda' devices, torch.cuda.*, 'nccl' go to the selected device",
    )
    p.add_argument("script", help="the Python script to run")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def plan(args: argparse.Namespace) -> tuple[LaunchSpec, Any]:
    """Resolve the device and build the launch spec; returns it with the Collectives shim."""
    from anydevice.backend import requested, select
    from anydevice.registry import get_registry
    from anydevice.selection import resolve

    limits = (("-n", args.nproc_per_node, 1), ("--nnodes", args.nnodes, 1), ("--max-restarts", args.max_restarts, 0))
    for name, value, low in limits:
        if value is not None and value < low:
            raise DistributedError(f"{name} must be at least {low}, got {value}.")
    if not Path(args.script).is_file():
        raise DistributedError(f"No script at {args.script}.", "Pass the path of a Python file: anydevice run -n 2 train.py.")
    registry = get_registry()
    choice = resolve(requested(), registry)  # cheap detection: imports no vendor package
    if args.nproc_per_node is not None:
        check_nproc(args.nproc_per_node, choice.name, registry.get(choice.name).spec, choice.detection)
    device = choice.name if choice.index is None else f"{choice.name}:{choice.index}"
    child_env = {**os.environ, settings.ANYDEVICE.name: device, **lifeline.parent_env()}
    if args.cuda_compat:
        child_env[settings.ANYDEVICE_CUDA_COMPAT.name] = "1"
    autoload.apply(child_env, selection=device)
    nproc = args.nproc_per_node or max(choice.detection.count or 1, 1)
    if nproc > 1 and settings.OMP_NUM_THREADS.get() is None:
        child_env[settings.OMP_NUM_THREADS.name] = "1"  # as torchrun does: N ranks must not each use every core
    env = {k: v for k, v in child_env.items() if os.environ.get(k) != v}
    with _environment(env):  # the parent loads what the children will (no unselected autoload)
        backend = select(device)
    collectives = backend.shims.collectives
    env.update(_integrations_env(backend))
    rank_env = {i: dict(collectives.launch_env(i, nproc)) for i in range(nproc)}
    spec = LaunchSpec(
        script=args.script,
        script_args=tuple(args.script_args),
        nproc_per_node=nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint,
        max_restarts=args.max_restarts,
        env=env,
        rank_env={i: e for i, e in rank_env.items() if e},
        **({"run_id": args.run_id} if args.run_id else {}),
    )
    return spec, collectives


def check_nproc(nproc: int, device: str, spec: DeviceSpec, detection: Detection) -> None:
    """Refuse ``-n`` above what the device takes on one node, before any planning work.

    A device of known count takes one process per device; the host (``DeviceSpec.hardware.host``: cpu)
    and any device of unknown count take :data:`PROCESSES_PER_CORE` per CPU core.
    """
    cores = os.cpu_count() or 1
    if detection.count and not (spec.hardware is not None and spec.hardware.host):
        limit, why = detection.count, f"{detection.count} {device} device(s) visible here, one process each"
    else:
        limit, why = PROCESSES_PER_CORE * cores, f"{PROCESSES_PER_CORE} processes per CPU core, {cores} core(s) here"
    if nproc > limit:
        raise DistributedError(
            f"-n {nproc} is more than {device} can take on this machine: at most {limit} ({why}).",
            f"Pass -n {limit} or fewer, or spread the job over machines with --nnodes.",
        )


def registered_launcher(name: str) -> Launcher:
    """The launcher registered under ``name`` (what a Collectives shim's ``launcher`` names)."""
    if name not in LAUNCHERS:
        raise DistributedError(
            f"The selected device's launcher '{name}' is not known to anydevice run.",
            f"Known launchers: {', '.join(sorted(LAUNCHERS))}. Register it with "
            "anydevice.cli.launch.register_launcher, or declare a known one in the Collectives shim.",
        )
    return LAUNCHERS[name]


def main(argv: list[str]) -> int:
    """Entry point of ``anydevice run``; returns the exit status (non-zero when a rank failed)."""
    if argv and argv[0] == _RANK_FLAG:
        return _rank_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        spec, collectives = plan(args)
        result: int = registered_launcher(collectives.launcher)(spec)
        return result
    except KeyboardInterrupt:
        return _interrupted(signal.SIGINT)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
