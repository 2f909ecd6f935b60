"""Helpers for tests: the repo's paths and real subprocess runs with a clean environment."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_PLUGINS = REPO / "tests" / "plugins"
TRAIN = REPO / "examples" / "train.py"
CLEARED = (
    "ANYDEVICE",
    "ANYDEVICE_PLUGINS",
    "ANYDEVICE_QUIET",
    "ANYDEVICE_DEBUG",
    "ANYDEVICE_ROLES",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",  # an srun task in the test machine's own environment is not the one a test means
    "SLURM_STEP_ID",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",  # anydevice's CLI sets it in its own process: a test's child starts as torch would
)


CHILD_DEFAULTS = {"OMP_NUM_THREADS": "1", "RAY_worker_niceness": "0"}
"""A child's defaults unless the runner's environment or ``extra`` sets them, for a machine the suite shares:
- one intra-op thread: on the 2-core machine a child using both cores waits on the other processes at every
  parallel region: the main job's 50 steps took 70-129 s with torch's default threads, 6-8 s with one
  (docs/benchmarks.md). The numbers a test compares come from the same code on both sides; ``anydevice run
  -n N`` already gives its ranks one thread.
- Ray's workers at the suite's priority: Ray renices them to 15 by default, and beside the other tests' busy
  workers a Ray task then gets ~3% of a core (the three-stage Ray test took 331 s in CI, 21 s alone)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(extra: Mapping[str, str] | None = None, pythonpath: Path | None = None) -> dict[str, str]:
    """The environment of a child process: ours without selection variables (``CHILD_DEFAULTS`` unless set), plus ``extra``."""
    env = {**CHILD_DEFAULTS, **{k: v for k, v in os.environ.items() if k not in CLEARED}}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def run(
    args: list[str], env: Mapping[str, str] | None = None, pythonpath: Path | None = None, timeout: float = 300, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run a real subprocess with this interpreter's environment."""
    return subprocess.run(args, env=child_env(env, pythonpath), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def python(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``python args...`` with the interpreter running the tests."""
    return run([sys.executable, *args], **kwargs)  # type: ignore[arg-type]


def anydevice_cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``python -m anydevice args...``."""
    return python("-m", "anydevice", *args, **kwargs)


def cli_in_process(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``anydevice args...`` in this process (``anydevice.cli.main``), for tests that read what it prints.

    Its stdout, stderr and exit status come back as :func:`anydevice_cli`'s would; ``env`` is set for the
    call only, and anydevice's selection, registry and start-up flag are as before afterwards. A
    subprocess stays the way to test exit by signal, pipes, start-up cost and isolation.
    """
    import contextlib
    import io

    import anydevice
    from anydevice import startup
    from anydevice.cli import main
    from anydevice.runtime.registry import reset_registry

    out, err = io.StringIO(), io.StringIO()
    saved_env, exempted = dict(os.environ), startup.exempted
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's --help and usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        startup.exempted = exempted
        anydevice.reset()
        reset_registry()
    return subprocess.CompletedProcess(["anydevice", *args], code, out.getvalue(), err.getvalue())


TINY_LLAMA_AUTO = (
    "import sys\n"
    "from transformers import LlamaConfig, LlamaForCausalLM\n"
    "c = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)\n"
    "LlamaForCausalLM(c).save_pretrained(sys.argv[1])\n"
    "m = LlamaForCausalLM.from_pretrained(sys.argv[1], device_map='auto')\n"
    "print(sorted({str(p.device) for p in m.parameters()}))\n"
)
"""A script: save a random tiny Llama to argv[1], load it with ``device_map="auto"``, print where its parameters are."""


def metadata_only_distribution(site: Path, name: str, version: str, entry_points: str) -> Path:
    """``name version`` installed in ``site`` as metadata only: a ``.dist-info`` with its METADATA and entry points."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    return info


def pip_site(name: str, packages: Sequence[Path], factory: pytest.TempPathFactory) -> Path:
    """``packages`` (source folders) pip-installed for real into a target directory named ``site-<name>``.

    Put it on PYTHONPATH to make their entry points visible; the test venv itself stays untouched. Built from
    copies (no build/ or egg-info litter in the repo), once a run: pytest-xdist's workers share the run's folder,
    and the first to ask builds it under a lock while the others wait. A name stands for one list of packages:
    asking for it with another list fails.
    """
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    target, done = root / f"site-{name}", root / f"site-{name}.done"
    holds = "\n".join(str(package) for package in packages)
    with open(root / f"site-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            assert done.read_text() == holds, f"site {name!r} was built from other packages: {done.read_text()}"
        else:
            shutil.rmtree(target, ignore_errors=True)  # a build that failed half-way
            build = Path(tempfile.mkdtemp(prefix=f"site-{name}-build-", dir=root))
            for package in packages:
                shutil.copytree(package, build / package.name)
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
                + [str(build / package.name) for package in packages],
                check=True,
                capture_output=True,
                text=True,
            )
            done.write_text(holds)
    return target
