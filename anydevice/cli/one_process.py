"""``anydevice run script.py`` for one process on one node: the rank started directly, no torch elastic.

The parent imports neither torch nor the device's shims: it resolves the device by cheap detection,
reads what the plugin declares for launching (``DeviceSpec.launch``) and starts one interpreter
with the environment a launcher gives rank 0 of a world of one (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` on loopback). Signals and the exit status are
handled as for a command (:mod:`anydevice.cli.command`), and the rank dies with the launcher
(:mod:`anydevice.cli.lifeline`). Several processes, several nodes or restarts go through torch
elastic (:mod:`anydevice.cli.launch`).
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from anydevice import settings
from anydevice.cli import command, rank_start

RANK_START = str(Path(rank_start.__file__).resolve())
"""The rank's program, run by its path: it imports no torch before the script (of anydevice, its script runner only)."""


def rank_environment(port: int | None = None) -> dict[str, str]:
    """What a launcher sets for rank 0 of a world of one on this node (torchrun's names)."""
    return {
        settings.RANK.name: "0",
        settings.LOCAL_RANK.name: "0",
        settings.WORLD_SIZE.name: "1",
        settings.LOCAL_WORLD_SIZE.name: "1",
        "GROUP_RANK": "0",
        "ROLE_RANK": "0",
        settings.MASTER_ADDR.name: "127.0.0.1",
        settings.MASTER_PORT.name: str(port if port is not None else free_port()),
    }


def free_port() -> int:
    """A TCP port free on loopback now (the rank's process group binds it if it makes one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(target: str, args: list[str], env: Mapping[str, str], is_module: bool, path0: str) -> int:
    """Start the one rank and wait for it; returns its status (``128 + N`` with one line when signal N stopped it)."""
    kind = "module" if is_module else "script"
    code = command.run_command([sys.executable, RANK_START, target, kind, path0, *args], env)
    if code > 128 and code - 128 in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        sys.stderr.write(f"anydevice run: interrupted by {signal.Signals(code - 128).name}; every rank was stopped.\n")
    elif code not in (0, command.NOT_FOUND, command.NOT_EXECUTABLE) and code < 128:
        sys.stderr.write(f"anydevice run: rank 0 failed (exit code {code}); the run was stopped.\n")
    return code
