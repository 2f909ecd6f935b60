"""``anydevice run``: launch N processes of a script or module the selected device's way, or one command.

    anydevice run [-n N] [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT] [--max-restarts K] [--cuda-compat]
                  (script.py | -m module | -- command) [args...]

The parent checks the options (:mod:`anydevice.cli.launch_args`; multi-node ones before anything
waits), resolves ``ANYDEVICE`` once by cheap detection (no unselected vendor package is imported:
torch's backend autoload is turned off for the children where the selection does not need it),
and reads what the plugin declares for launching (``DeviceSpec.launch``: the launcher's name, the
per-rank variables, what bounds ``-n``), without loading the shims.

One process on one node (``anydevice run script.py``, the default on a device of one) is one rank
started directly (:mod:`anydevice.cli.one_process`): no torch and no shims in the parent, no torch
elastic, the rank started by :mod:`anydevice.cli.rank_start`, so the script starts about as soon
as under ``python``. Otherwise the parent loads the selected plugin's shims and hands a
:class:`LaunchSpec` to the declared launcher: the entry of :data:`LAUNCHERS` under that name,
``"torchrun"`` (torch elastic, one fresh interpreter per rank) or ``"spawn"`` (torch elastic, ranks
started by multiprocessing spawn; TorchTPU sets ``set_tpu_launch_env`` in the parent through its
``Launch.env``) or ``"single-process"`` (one rank only, e.g. mps). :func:`register_launcher` adds
more; a device that launches its own way registers a launcher and declares its name.

Both built-in launchers run on torch elastic (``torch.distributed.launcher.api``): a failing rank
stops the others at once, the run exits non-zero and shows that rank's traceback, and
``--max-restarts`` restarts the whole group (``TORCHELASTIC_RESTART_COUNT`` counts attempts).
Every child gets ``ANYDEVICE`` set to the device the parent resolved, plus the device's
``Launch.env(local_rank, local_world_size)`` (e.g. ``NEURON_RT_VISIBLE_CORES``) set before
its interpreter imports anything. A rank's ``sys.path[0]`` is what ``python`` would give it: the
script's directory, or the working directory for ``-m``; nothing is imported from the working
directory before that (the rank starts through a ``-c`` bootstrap that sets ``sys.path[0]`` first).

``-- command`` (:mod:`anydevice.cli.command`) runs one console command (``vllm serve MODEL``) with
the same environment (``anydevice.integrations.launch_environment`` included), one process.

Lifetime (:mod:`anydevice.cli.lifeline`): every rank dies with the launcher, also when it is killed with
SIGKILL, and so do the processes the ranks start; Ctrl-C (SIGINT) stops every rank and the run ends
with one line on stderr and status 130. ``-n`` is checked against what the device takes
(:func:`check_nproc`) before anything is planned. ``--cuda-compat`` runs CUDA-written scripts
unmodified (:mod:`anydevice.cuda_compat` in every rank).
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import logging
import math
import os
import re
import signal
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from anydevice import settings
from anydevice.cli import launch_args, lifeline, rank_end, rank_start
from anydevice.cli.launch_args import build_parser  # noqa: F401 - where callers of 0.2 found it
from anydevice.distributed import slurm as slurm_env
from anydevice.errors import AnyDeviceError, DistributedError, UsageError
from anydevice.runtime import autoload

if TYPE_CHECKING:
    from anydevice.contract.device_spec import Detection, DeviceSpec
    from anydevice.runtime.backend import Backend
    from anydevice.runtime.registry import Registry

# A rank's interpreter runs this first: sys.path[0] becomes what `python script.py` / `python -m` would
# give (argv[3]) before anything is imported, so no module in the working directory shadows one anydevice
# or torch imports (`python -m anydevice.cli.launch` would put the working directory first).
# Its argv is [target, kind, path0, rank_env, *args]: torch elastic names a run after the first argument
# that does not start with "-", so the code rides attached to "-c" and the target comes first.
RANK_BOOTSTRAP = (
    "import sys; sys.path[0] = sys.argv[3]; from anydevice.cli.launch import rank_main; sys.exit(rank_main(sys.argv[1:]))"
)
PROCESSES_PER_CORE = 4
"""``-n`` bound where the device's count does not bound it (the host, a device of unknown count)."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs: what to run, how many ranks, rendezvous and environments."""

    script: str
    """The script's path, or the module's name when :attr:`is_module`."""
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
    """Extra variables per local rank, from the device's ``DeviceSpec.launch.env``."""
    is_module: bool = False
    """Run :attr:`script` as a module, as ``python -m`` does."""

    @property
    def path0(self) -> str:
        """``sys.path[0]`` of every rank: as ``python script.py`` (the script's directory) or ``python -m`` (the cwd)."""
        return os.getcwd() if self.is_module else str(Path(self.script).resolve().parent)


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


def first_failure(failures: Mapping[int, Any]) -> tuple[int, Any]:
    """The rank that failed first, and its ``ProcessFailure``.

    torch elastic orders failures by their error files' timestamps, in whole seconds, and a tie goes to the lowest
    rank: a rank 0 that failed because rank 1 crashed in the same second was named as the failed rank. The error
    files' modification times (nanoseconds) break the tie; a failure without a file (a signal) comes after those
    with one in its second.

    A rank the launcher itself stopped (SIGTERM, then SIGKILL, once another rank failed) comes after every rank
    that failed on its own: its status is the stop, not the failure (a rank's ``sys.exit(3)`` was reported as 1).
    """

    def when(item: tuple[int, Any]) -> tuple[bool, int, float]:
        stopped = item[1].exitcode in (-signal.SIGTERM, -signal.SIGKILL)
        try:
            return stopped, item[1].timestamp, os.stat(item[1].error_file).st_mtime_ns
        except (OSError, TypeError, ValueError):
            return stopped, item[1].timestamp, math.inf

    return min(failures.items(), key=when)


SUMMARY_LIMIT = 20_000
"""Characters of torch elastic's failure summary printed; a rank's own stderr (above it) has the message whole."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def failure_summary(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """torch elastic's summary of a failed run made safe to print: a rank's terminal escape sequences (and other
    control characters) shown escaped, and a message longer than ``limit`` cut, saying so."""
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)
    if cut > 0:
        text += f"\n... (the summary was cut: {cut:,} more characters; the rank's own stderr above has its message whole)"
    return text


def exit_status(exitcode: int) -> int:
    """The launcher's status for a rank's exit code: the code itself, or ``128 + N`` (a shell's) for signal N."""
    if exitcode > 0:
        return exitcode
    return 128 - exitcode if exitcode < 0 else 1


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
            rank, failure = first_failure(exc.failures)
            exc.__dict__["get_first_failure"] = lambda: (rank, failure)  # torch's "Root Cause" below names the same rank
            if all(f.exitcode in (lifeline.INTERRUPTED, -signal.SIGINT) for f in exc.failures.values()):
                return _interrupted(signal.SIGINT)  # Ctrl-C reached the ranks before the launcher
            failed: Any = exc  # torch elastic's format_msg is untyped
            summary = str(failed.format_msg())
            sys.stderr.write(failure_summary(summary) + "\n")
            sys.stderr.write(f"anydevice run: rank {rank} failed (exit code {failure.exitcode}); the run was stopped.\n")
            return exit_status(failure.exitcode)
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


def rank_args(spec: LaunchSpec) -> list[str]:
    """The interpreter arguments of one rank under :func:`torchrun` (see :data:`RANK_BOOTSTRAP`)."""
    rank_env = json.dumps({str(k): dict(v) for k, v in spec.rank_env.items()})
    kind = "module" if spec.is_module else "script"
    return ["-c" + RANK_BOOTSTRAP, spec.script, kind, spec.path0, rank_env, *spec.script_args]


def torchrun(spec: LaunchSpec) -> int:
    """torch elastic (torchrun's engine): each rank is a fresh interpreter running the script or module."""
    return _elastic(spec, sys.executable, rank_args(spec), "spawn")


def spawn(spec: LaunchSpec) -> int:
    """torch elastic with ranks started by multiprocessing spawn (TorchTPU's way).

    The environment the parent holds when this is called (e.g. what ``set_tpu_launch_env`` set)
    is inherited; per-rank variables are set before the script runs, after torch is imported.
    """
    rank_env = {k: dict(v) for k, v in spec.rank_env.items()}
    args = [spec.script, list(spec.script_args), rank_env, spec.is_module, spec.path0]
    return _elastic(spec, run_rank, args, "spawn")


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
# rank installs, at its first import of one of them, a hook that fixes Trainer's optimizer where the device rejects it
# (anydevice.cli.rank_start).


def _integrations_env(backend: Any) -> dict[str, str]:
    from anydevice.integrations import launch_environment

    return launch_environment(backend)


# --- end of the integrations hook ------------------------------------------------------------------------

LAUNCHERS: dict[str, Launcher] = {"torchrun": torchrun, "spawn": spawn, "single-process": single_process}


def register_launcher(name: str, launcher: Launcher) -> None:
    """Make ``launcher`` available to devices that declare ``DeviceSpec(launch=Launch(launcher=name))``."""
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


def run_rank(
    target: str,
    args: list[str],
    rank_env: Mapping[int, Mapping[str, str]],
    is_module: bool = False,
    path0: str | None = None,
) -> None:
    """Run ``target`` (a script's path, or a module as ``python -m`` does) as ``__main__`` in this rank."""
    local = int(settings.LOCAL_RANK.get() or 0)
    os.environ.update(rank_env.get(local, {}))
    try:
        rank_start.run(target, args, is_module, path0)
    except Exception as exc:
        _end_refused(exc)
        raise


def _end_refused(exc: Exception) -> None:
    """An anydevice error from the rank's script: one clear error on stderr, and the same text (not a traceback) in
    torch elastic's error file, which the launcher's summary shows; then the rank ends with status 1."""
    from anydevice.runtime import refusals

    text = refusals.one_error(exc, exc.__traceback__)
    if text is None:
        return
    sys.stderr.write(text)
    sys.stderr.flush()
    _write_error_file(text.rstrip("\n"))  # the text, not a traceback
    raise SystemExit(1) from None


def _write_error_file(text: str, callstack: str | None = None) -> None:
    """The rank's failure in torch elastic's error file (``TORCHELASTIC_ERROR_FILE``), in the shape ``@record``
    writes, but whole: a temporary file, then a rename (:mod:`anydevice.files.safe_files`).

    torch writes it in place; a rank stopped mid-write (the launcher's SIGTERM once another rank has failed) left
    an empty file, and the launcher, parsing it, failed with a JSONDecodeError instead of naming the failed rank.
    """
    from anydevice.files import safe_files

    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not error_file:
        return
    extra = {"timestamp": str(int(time.time()))} | ({"py_callstack": callstack} if callstack is not None else {})
    try:
        safe_files.write_json(error_file, {"message": {"message": text, "extraInfo": extra}}, ours_keys=("message",), force=True)
    except (OSError, AnyDeviceError):
        pass  # the summary then says only the exit status


def _recorded(run: Callable[..., None]) -> Callable[..., None]:
    """torch elastic's ``@record`` for a rank (fault handler on; an exception's message and traceback in the
    error file the launcher's summary shows), with the file written whole (:func:`_write_error_file`)."""

    @functools.wraps(run)
    def recorded(*args: Any) -> None:
        try:
            faulthandler.enable(all_threads=True)
        except (RuntimeError, ValueError, OSError):  # no stderr to write to (``2>&-``): the rank runs without it
            pass
        try:
            run(*args)
        except Exception as exc:
            _write_error_file(f"{type(exc).__name__}: {exc}", traceback.format_exc())
            raise

    return recorded


def rank_main(argv: list[str]) -> int:
    """Child side of :func:`torchrun` (after :data:`RANK_BOOTSTRAP`): the rank's environment, then ``@record``."""
    lifeline.die_with_parent()  # first: before torch is imported
    target, kind, path0, rank_env_json, args = argv[0], argv[1], argv[2], argv[3], argv[4:]
    rank_env = {int(k): v for k, v in json.loads(rank_env_json).items()}
    local = int(settings.LOCAL_RANK.get() or 0)
    os.environ.update(rank_env.get(local, {}))  # before torch (and any vendor) is imported
    from anydevice.distributed import joining

    with lifeline.quiet_interrupt():
        try:
            _recorded(run_rank)(target, args, {}, kind == "module", path0)
        except SystemExit as exc:
            if exc.code in (None, 0):
                joining.mark_left(settings.rank(), settings.world_size())  # peers waiting in init stop at once
                rank_end.finish()
            raise
    joining.mark_left(settings.rank(), settings.world_size())
    rank_end.finish()  # frees a gloo group that outlives the script before Python's teardown (rank_end)
    return 0


def plan(args: argparse.Namespace) -> tuple[LaunchSpec, str]:
    """Check the options, resolve the device once and build the launch spec; returns it with the launcher's name."""
    spec, _, launcher = _plan(args)
    return spec, launcher


@dataclass(frozen=True)
class _Selected:
    """The device resolved for a run, and the environment every process of the run gets."""

    registry: Registry
    choice: Any
    env: dict[str, str]
    nproc: int
    launcher: str


def _select(args: argparse.Namespace) -> _Selected:
    """Check the options and resolve the device by cheap detection: no torch, no shims (the one resolution)."""
    from anydevice.runtime.backend import requested
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import resolve

    limits = (("-n", args.nproc_per_node, 1), ("--nnodes", args.nnodes, 1), ("--max-restarts", args.max_restarts, 0))
    for name, value, low in limits:
        if value is not None and value < low:
            raise UsageError(f"{name} must be at least {low}, got {value}.")
    command = getattr(args, "command", None)
    module = getattr(args, "module", None)
    if command:
        _refuse_multi_process_command(args)
    else:
        launch_args.check_rendezvous(args.nnodes, args.node_rank, args.rdzv_endpoint, args.run_id)
        if module:
            _check_top_level(module)
        elif not Path(args.script).is_file():
            raise UsageError(f"No script at {args.script}.", "Pass the path of a Python file: anydevice run -n 2 train.py.")
    registry = get_registry()
    request = requested()
    if getattr(args, "role", None) is not None:
        from anydevice.runtime import roles

        if roles.declared():  # every role resolves and pairs, before anything starts (one node: one host)
            roles.plan([*roles.declared(), args.role], one_host=args.nnodes == 1, registry=registry)
        request = roles.request_for(args.role)
    choice = resolve(request, registry)  # cheap detection: imports no vendor package; the only resolution
    spec = registry.get(choice.name).spec
    if args.nproc_per_node is not None and not command:
        check_nproc(args.nproc_per_node, choice.name, spec, choice.detection)
    device = choice.name if choice.index is None else f"{choice.name}:{choice.index}"
    child_env = {**os.environ, settings.ANYDEVICE.name: device, **lifeline.parent_env()}
    if args.cuda_compat:
        child_env[settings.ANYDEVICE_CUDA_COMPAT.name] = "1"
    autoload.apply(child_env, selection=device)
    nproc = 1 if command else args.nproc_per_node or max(choice.detection.count or 1, 1)
    if nproc > 1 and settings.OMP_NUM_THREADS.get() is None:
        child_env[settings.OMP_NUM_THREADS.name] = "1"  # as torchrun does: N ranks must not each use every core
    env = {k: v for k, v in child_env.items() if os.environ.get(k) != v}
    launcher = _guarded(registry, choice.name, "launch.launcher", spec.launch.launcher_name)
    return _Selected(registry, choice, env, nproc, launcher)


def _plan(args: argparse.Namespace) -> tuple[LaunchSpec, Backend, str]:
    from anydevice.runtime.backend import load_backend

    command = getattr(args, "command", None)
    module = getattr(args, "module", None)
    selected = _select(args)
    env, registry, choice, nproc = selected.env, selected.registry, selected.choice, selected.nproc
    with _environment(env):  # the parent loads what the children will (no unselected autoload)
        backend = load_backend(choice, registry)
    env.update(_integrations_env(backend))
    task = getattr(args, "srun_task", None)  # an srun task (slurm_env.srun_launch): the node's other tasks' ranks count
    first, local_world = slurm_env.local_ranks(task, nproc) if task is not None else (0, nproc)
    rank_env = {} if command else _launch_envs(registry, choice.name, nproc, first, local_world)
    spec = LaunchSpec(
        script=module or (command[0] if command else args.script),
        script_args=tuple(command[1:] if command else args.script_args),
        nproc_per_node=nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint,
        max_restarts=args.max_restarts,
        env=env,
        rank_env={i: e for i, e in rank_env.items() if e},
        is_module=bool(module),
        **({"run_id": args.run_id} if args.run_id else {}),
    )
    return spec, backend, selected.launcher


def _guarded(registry: Registry, device: str, stage: str, call: Callable[[], Any]) -> Any:
    """``call`` (the plugin's code) under the registry's guard; a plugin's failure is a PluginError naming it."""
    from anydevice.errors import AnyDeviceError, PluginError
    from anydevice.runtime import guard

    plugin = registry.get(device).plugin
    try:
        return registry.call(plugin, stage, call)
    except guard.PluginCallError as exc:
        if isinstance(exc.cause, AnyDeviceError):
            raise exc.cause from None
        raise PluginError(
            plugin, f"{exc.error} (at {exc.stage})", "Run `anydevice doctor`, or choose another device with ANYDEVICE."
        ) from exc.cause


def _launch_envs(
    registry: Registry, device: str, nproc: int, first: int = 0, local_world: int | None = None
) -> dict[int, dict[str, str]]:
    """Each of this launcher's ``nproc`` ranks' variables (keyed by its index here) from the device's ``DeviceSpec.launch``,
    called guarded like every other call into a plugin.

    ``first``/``local_world``: where the node holds other launchers' ranks too (several srun tasks), these ranks are
    local ranks ``first ...`` of ``local_world``: the plugin is asked for those, and ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``
    replace torch elastic's per-launcher count.
    """
    launch = registry.get(device).spec.launch
    world = local_world or nproc
    envs = {}
    for i in range(nproc):
        envs[i] = _guarded(registry, device, "launch.env", functools.partial(launch.rank_env, first + i, world))
        if (first, world) != (0, nproc):
            envs[i].update({settings.LOCAL_RANK.name: str(first + i), settings.LOCAL_WORLD_SIZE.name: str(world)})
    return envs


def _refuse_multi_process_command(args: argparse.Namespace) -> None:
    """``-- command`` is one process: refuse the options that only make sense for N ranks."""
    given = [
        flag
        for flag, value in (
            ("-n", args.nproc_per_node not in (None, 1)),
            ("--nnodes", args.nnodes != 1),
            ("--node-rank", args.node_rank is not None),
            ("--rdzv-endpoint", args.rdzv_endpoint is not None),
            ("--max-restarts", args.max_restarts != 0),
            ("--run-id", args.run_id is not None),
        )
        if value
    ]
    if given:
        raise UsageError(
            f"anydevice run -- {args.command[0]} starts one process; {', '.join(given)} apply to Python scripts and modules.",
            "Start N ranks with `anydevice run -n N script.py` or `-m module`; a command that starts its own workers takes "
            "its own option for them (e.g. vllm serve --tensor-parallel-size N).",
        )


def _check_top_level(module: str) -> None:
    """Refuse ``-m`` of a module whose top-level package is nowhere (without importing anything)."""
    from importlib.machinery import PathFinder

    top = module.split(".")[0]
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"-m {module!r} is not a module name.", "Pass a dotted module name: anydevice run -m pkg.train.")
    if top in sys.builtin_module_names or top in sys.modules:
        return
    if PathFinder.find_spec(top, [os.getcwd(), *sys.path[1:]]) is None:
        raise UsageError(
            f"No module named {top} (looked in the working directory and this Python's sys.path).",
            "Install the package, or run from the directory that holds it, as for `python -m`.",
        )


def check_nproc(nproc: int, device: str, spec: DeviceSpec, detection: Detection) -> None:
    """Refuse ``-n`` above what the device takes on one node, before any planning work.

    A device of known count takes one process per device; a device whose ranks share the cores
    (``Launch(ranks="per_core")``: cpu) and any device of unknown count take :data:`PROCESSES_PER_CORE` per core.
    """
    cores = os.cpu_count() or 1
    if detection.count and spec.launch.ranks == "per_device":
        limit, why = detection.count, f"{detection.count} {device} device(s) visible here, one process each"
    else:
        limit, why = PROCESSES_PER_CORE * cores, f"{PROCESSES_PER_CORE} processes per CPU core, {cores} core(s) here"
    if nproc > limit:
        raise UsageError(
            f"-n {nproc} is more than {device} can take on this machine: at most {limit} ({why}).",
            f"Pass -n {limit} or fewer, or spread the job over machines with --nnodes.",
        )
    counts = spec.hardware.process_counts() if spec.hardware is not None and spec.hardware.process_counts else ()
    if counts and nproc not in counts:
        raise DistributedError(
            f"-n {nproc} is not a whole slice of this {device} host: it runs {', '.join(map(str, counts))} process(es) "
            "per node (other counts hang at the runtime's start-session barrier).",
            f"Pass -n {' or '.join(map(str, counts))}.",
        )


def registered_launcher(name: str) -> Launcher:
    """The launcher registered under ``name`` (what the device's ``DeviceSpec.launch`` names)."""
    if name not in LAUNCHERS:
        raise DistributedError(
            f"The selected device's launcher '{name}' is not known to anydevice run.",
            f"Known launchers: {', '.join(sorted(LAUNCHERS))}. The plugin should declare one of them as "
            "DeviceSpec(launch=Launch(launcher=...)), or register its own with anydevice.cli.launch.register_launcher(name, fn).",
        )
    return LAUNCHERS[name]


def main(argv: list[str]) -> int:
    """Entry point of ``anydevice run``; returns the exit status (non-zero when a rank or the command failed).

    Nothing the run started outlives it (:func:`lifeline.end_descendants`), and Ctrl-C ends it at any moment:
    one line, status 130, without waiting on what torch elastic left half-started (a thread, a store).
    """
    try:
        return _main(argv)
    except KeyboardInterrupt:
        code = _interrupted(signal.SIGINT)
        lifeline.end_descendants()
        _end_now(code)
    finally:
        lifeline.end_descendants()


def _end_now(code: int) -> NoReturn:
    """End the launcher now with ``code``, its streams flushed (an interrupted torch elastic may hold it otherwise)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _main(argv: list[str]) -> int:
    args = launch_args.parse(argv)
    slurm_env.srun_launch(args)  # inside an srun task: the tasks' ranks form one world
    if _one_process(args):
        return _run_one_process(args)
    spec, _, name = _plan(args)
    lifeline.guard_descendants()  # what the ranks or the command start ends with this run
    if args.command:
        from anydevice.cli.command import run_command

        with _environment(spec.env):
            return run_command(args.command, os.environ)
    launcher = registered_launcher(name)
    return launcher(spec)


def _one_process(args: argparse.Namespace) -> bool:
    """True for a script or module run as one process on this node without restarts: no torch elastic needed."""
    return (
        not getattr(args, "command", None)
        and args.nproc_per_node in (None, 1)
        and args.nnodes == 1
        and args.max_restarts == 0
        and args.rdzv_endpoint is None
        and args.node_rank is None
    )


ONE_PROCESS_LAUNCHERS = ("torchrun", "single-process")
"""Declared launchers whose one-process run is exactly one rank started directly (a spawn or a plugin's own is not)."""


def _run_one_process(args: argparse.Namespace) -> int:
    """One rank, started directly (:mod:`anydevice.cli.one_process`); the parent imports neither torch nor the shims."""
    from anydevice.cli import one_process
    from anydevice.integrations import selection_environment

    selected = _select(args)
    if selected.nproc != 1 or selected.launcher not in ONE_PROCESS_LAUNCHERS:  # N devices found, or a launcher of its own
        spec, _, name = _plan(args)
        lifeline.guard_descendants()
        return registered_launcher(name)(spec)
    name = selected.choice.name
    env = {**os.environ, **selected.env, **selection_environment(name)}
    env.update(one_process.rank_environment())
    env.update(_launch_envs(selected.registry, name, 1)[0])
    lifeline.guard_descendants()  # what the rank starts ends with this run
    module = getattr(args, "module", None)
    target = module or args.script
    path0 = os.getcwd() if module else str(Path(target).resolve().parent)
    return one_process.run(target, list(args.script_args), env, bool(module), path0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
