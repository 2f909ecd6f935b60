"""One launch, engine-independent: the target, the script, and the start command every host runs.

The start command is ``anydevice run`` with the node count, this host's rank and the rendezvous endpoint as
shell expressions the engine fills in (``"$SKYPILOT_NODE_RANK"``, ``"$JOB_COMPLETION_INDEX"``, SLURM's srun tasks);
the device is ``ANYDEVICE``, set from ``--target``: no host branches on what it finds.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from anydevice.contract.chips import shown
from anydevice.errors import UsageError
from anydevice.launch_specs.target import Target

DEFAULT_PORT = 29400
"""The rendezvous port on the first host (torch elastic's c10d default)."""
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", flags=re.ASCII)
"""A job name every engine takes: a DNS label short enough for JobSet's pod names (``<name>-workers-0-0-xxxxx``)."""
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}", flags=re.ASCII)
"""A container image reference's characters (registry, path, tag, digest): no space or line break reaches the spec."""


@dataclass(frozen=True)
class Plan:
    """What to start where: the target, the script with its arguments, the job's name and rendezvous port."""

    target: Target
    script: str
    script_args: tuple[str, ...] = ()
    name: str = "anydevice"
    port: int = DEFAULT_PORT
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise UsageError(
                f"--name {self.name!r} is not a job name every engine takes.",
                "Use 1 to 40 lower-case letters, digits and '-', starting and ending with a letter or digit, e.g. train-7.",
            )
        if self.image is not None and not _IMAGE.fullmatch(self.image):
            raise UsageError(
                f"--image '{shown(self.image)}' is not a container image reference.",
                "Name it as registry/name[:tag][@sha256:digest], without spaces, e.g. --image python:3.12-slim.",
            )
        if not 1 <= self.port <= 65535:
            raise UsageError(f"--port {self.port} is not a port from 1 to 65535.", f"e.g. --port {DEFAULT_PORT}.")

    @property
    def device_env(self) -> dict[str, str]:
        """The variables every host's command gets: the device from the flag, never found by the host itself."""
        return {"ANYDEVICE": self.target.device, **self.env}

    def start(self, rendezvous: tuple[str, str, str] | None) -> str:
        """The host's start command; ``rendezvous`` is ``(nnodes, node_rank, head)`` as shell words (quoted expressions).

        One host, or ``rendezvous`` None (srun tasks, which ``anydevice run`` reads itself): ``anydevice run -n P
        SCRIPT ARGS``. Several hosts: node ``node_rank`` of ``nnodes`` meets the others at ``head:port`` (a static
        rendezvous at the first host's address, each host's rank fixed by the engine).
        """
        words = ["anydevice", "run", "-n", str(self.target.processes)]
        if self.target.multi_host and rendezvous is not None:
            nnodes, node_rank, head = rendezvous
            words += ["--nnodes", nnodes, "--node-rank", node_rank, "--rdzv-endpoint", f"{head}:{self.port}"]
            words += ["--run-id", self.name]
        return " ".join([*words, shlex.quote(self.script), *(shlex.quote(a) for a in self.script_args)])

    def install(self) -> str:
        """The install step: anydevice with the target's extra (``anydevice[tpu]``), the version that wrote the spec."""
        return f"python3 -m pip install {shlex.quote(requirement(self.target.device))}"


def requirement(device: str) -> str:
    """``anydevice[tpu]==0.4.0``: the extra named like the device where the package declares one (tpu, neuron, xla)."""
    from importlib.metadata import PackageNotFoundError, metadata

    from anydevice.release import VERSION

    try:
        extras = set(metadata("anydevice").get_all("Provides-Extra") or ())
    except PackageNotFoundError:  # a checkout on sys.path, never installed: its extras cannot be read
        raise UsageError(
            "anydevice's package metadata is not installed here, so the target's extra cannot be named.",
            "Install the checkout (pip install -e .) and run anydevice launch again.",
        ) from None
    return f"anydevice[{device}]=={VERSION}" if device in extras else f"anydevice=={VERSION}"
