"""Every environment variable anydevice reads, in one place.

Each variable is a :class:`Setting`; read it with ``SETTING.get()``. A vendor's variables
(``PJRT_DEVICE``, ``CUDA_VISIBLE_DEVICES``, ...) are declared by the plugin that reads them
(``DeviceSpec.settings``). The README's "Environment variables" table is checked against
:data:`ALL` and every built-in plugin's settings by the tests, so a new variable cannot go
undocumented.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default and what it does."""

    name: str
    doc: str
    default: str | None = None
    owner: str = "anydevice"

    def get(self) -> str | None:
        """The variable's value, stripped; the default when unset or empty."""
        value = os.environ.get(self.name, "").strip()
        return value or self.default

    def flag(self) -> bool:
        """True for 1/true/yes/on, False when unset or 0/false/no/off; any other value is an error naming the variable."""
        value = (self.get() or "").lower()
        if value in _YES:
            return True
        if not value or value in _NO:
            return False
        raise _error(
            f"{self.name}={self.get()!r} is not a yes/no value.", f"Set {self.name}=1 (on) or {self.name}=0 (off), or unset it."
        )


_YES, _NO = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


def _error(message: str, fix: str) -> Exception:
    from anydevice.errors import AnyDeviceError  # imported here: errors imports nothing of ours, but keep settings first

    return AnyDeviceError(message, fix)


ANYDEVICE: Final = Setting(
    "ANYDEVICE",
    "Device selection: a name (`cpu`, `cuda`, `tpu`, ...), `name:index`, `auto`, or an ordered list "
    "`tpu,cuda,cpu`. An explicit `anydevice.use()` call wins over it.",
    "auto",
)
ANYDEVICE_ROLES: Final = Setting(
    "ANYDEVICE_ROLES",
    "The device of each role of a program whose parts run on different devices: `role=selection` entries, comma "
    "separated (`trainer=xla,rollout=cpu`; a list continues its role: `trainer=tpu,cuda,rollout=cpu`). Read by "
    "`ad.device(role=...)`, `anydevice run --role` and the Ray integration's role groups; a role without an entry "
    "follows `ANYDEVICE`. `anydevice doctor` shows the roles. docs/roles.md.",
)
ANYDEVICE_PLUGINS: Final = Setting(
    "ANYDEVICE_PLUGINS",
    "Comma list of plugin (entry-point) names to load; every other installed plugin is ignored. Unset: load all. "
    "A name that is not installed is an error that lists the installed ones.",
)
ANYDEVICE_QUIET: Final = Setting(
    "ANYDEVICE_QUIET",
    "Set to 1 to silence the one stderr line that says which device `auto` or a list chose.",
)
ANYDEVICE_DEBUG: Final = Setting(
    "ANYDEVICE_DEBUG",
    "Set to 1 to make the CLI print full tracebacks instead of one-sentence errors.",
)
ANYDEVICE_CACHE_DIR: Final = Setting(
    "ANYDEVICE_CACHE_DIR",
    "Root of the compile caches plugins use (inductor, XLA, NEFF); default `~/.cache/anydevice`. When it is not "
    "writable, `ad.compile` caches in `anydevice-cache-<uid>` under the temporary directory, with one warning.",
)
ANYDEVICE_DETECT_TIMEOUT: Final = Setting(
    "ANYDEVICE_DETECT_TIMEOUT",
    "Seconds a third-party plugin may take for each call into it: import, registration, detection, its hooks and, "
    "after selection, `prepare_environment` and `load` (after torch is imported). A plugin that takes longer is "
    "reported by name and stage (`anydevice list`, `doctor`) and skipped; the others keep working. Above 0, at most 3600.",
    "5",
)
ANYDEVICE_KEEP_AUTOLOAD: Final = Setting(
    "ANYDEVICE_KEEP_AUTOLOAD",
    "Set to 1 to let `anydevice run` and the CLI keep torch's backend autoload (which imports "
    "torch_tpu, TorchNeuron) even when the selected device does not need it.",
)
ANYDEVICE_CUDA_COMPAT: Final = Setting(
    "ANYDEVICE_CUDA_COMPAT",
    "Set to 1 to run CUDA-written scripts unmodified on the selected device: `ANYDEVICE_CUDA_COMPAT=1 python "
    "script.py` (a start-up hook installed with anydevice enables it when the script imports torch, also in "
    "`mp.spawn` children and torchrun ranks). `anydevice run --cuda-compat` sets it.",
)
ANYDEVICE_CUDA_COMPAT_REPORT: Final = Setting(
    "ANYDEVICE_CUDA_COMPAT_REPORT",
    "With cuda-compat on: a path where each process writes the migration report (every distinct CUDA call and "
    "what it became) as JSON at exit; ranks other than 0 add `.rank<N>` before the suffix.",
)
ANYDEVICE_STRICT: Final = Setting(
    "ANYDEVICE_STRICT",
    "Set to 1 for strict mode: an op that runs on the CPU instead of the selected device is an error naming the op "
    "and the line of user code, raised by `ad.step()` at the step where it happened (`ad.use(..., strict=True)` "
    "does the same). Off by default; `anydevice doctor` says whether it is on.",
)
ANYDEVICE_LAUNCH_PARENT: Final = Setting(
    "ANYDEVICE_LAUNCH_PARENT",
    "Set by `anydevice run` in its ranks and command: the launcher's pid. A rank ends when that process ends (also on "
    "kill -9); every process that still carries it when the run ends is ended too.",
)
LOCAL_RANK: Final = Setting(
    "LOCAL_RANK", "Set by launchers (torchrun): the rank on this node; picks the device index.", owner="torchrun"
)
RANK: Final = Setting("RANK", "Set by launchers: the global rank.", owner="torchrun")
WORLD_SIZE: Final = Setting("WORLD_SIZE", "Set by launchers: the number of processes.", owner="torchrun")
LOCAL_WORLD_SIZE: Final = Setting("LOCAL_WORLD_SIZE", "Set by launchers: processes on this node.", owner="torchrun")
MASTER_ADDR: Final = Setting("MASTER_ADDR", "Set by launchers: rendezvous host.", owner="torchrun")
MASTER_PORT: Final = Setting("MASTER_PORT", "Set by launchers: rendezvous port.", owner="torchrun")
SLURM_PROCID: Final = Setting(
    "SLURM_PROCID",
    "Set by srun: the task's global rank. With no torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK), "
    "`ad.distributed.init()` and `anydevice run` read the SLURM task variables as the launch environment.",
    owner="SLURM",
)
SLURM_STEP_ID: Final = Setting(
    "SLURM_STEP_ID",
    "Set by srun, not in the batch script: with it SLURM_PROCID is an srun task; without it (sbatch without srun) one "
    "process is a world of one.",
    owner="SLURM",
)
SLURM_NTASKS: Final = Setting("SLURM_NTASKS", "Set by srun: the number of tasks (the world size).", owner="SLURM")
SLURM_LOCALID: Final = Setting("SLURM_LOCALID", "Set by srun: the task's rank on its node (the local rank).", owner="SLURM")
SLURM_NODELIST: Final = Setting(
    "SLURM_NODELIST",
    "Set by SLURM: the job's nodes (`node[01-04,07]`); the first is the master address unless MASTER_ADDR is set.",
    owner="SLURM",
)
SLURM_JOB_ID: Final = Setting(
    "SLURM_JOB_ID",
    "Set by SLURM: the job id; the rendezvous port is 15000 + id % 15000 unless MASTER_PORT is set.",
    owner="SLURM",
)
SLURM_NODEID: Final = Setting("SLURM_NODEID", "Set by srun: the task's node index (the node rank).", owner="SLURM")
SLURM_TASKS_PER_NODE: Final = Setting(
    "SLURM_TASKS_PER_NODE", "Set by SLURM: tasks per node (`2(x3),1`); gives the local world size.", owner="SLURM"
)
SLURM_NTASKS_PER_NODE: Final = Setting(
    "SLURM_NTASKS_PER_NODE",
    "Set by SLURM for --ntasks-per-node: the local world size when SLURM_TASKS_PER_NODE is absent.",
    owner="SLURM",
)
TORCHELASTIC_RESTART_COUNT: Final = Setting(
    "TORCHELASTIC_RESTART_COUNT",
    "Set by torch elastic (`anydevice run --max-restarts`, torchrun): how many times the group was restarted. "
    "`ad.distributed.init()` keys its rendezvous by it, so a restarted group never reads the previous attempt's addresses.",
    owner="torchrun",
)
OMP_NUM_THREADS: Final = Setting(
    "OMP_NUM_THREADS",
    "CPU threads per process. `anydevice run` sets it to 1 in the children when it starts more than one process per "
    "node and it is unset (as torchrun does).",
    owner="OpenMP",
)
TORCH_DEVICE_BACKEND_AUTOLOAD: Final = Setting(
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "torch's out-of-tree backend autoload (`0` disables it). `anydevice run` and the CLI set it to 0 "
    "when the selected device does not need an autoloaded backend (so torch_tpu is not imported), also over "
    "an inherited `1` (torch_tpu writes `1` into every process that imported it); keep it on with "
    "ANYDEVICE_KEEP_AUTOLOAD=1.",
    owner="torch",
)

CXX: Final = Setting(
    "CXX",
    "The C++ compiler torch.compile's inductor backend uses on CPU (default `g++`; `clang++` on macOS). "
    "`anydevice doctor` checks that it runs.",
    owner="torch inductor",
)


VLLM_PLUGINS: Final = Setting(
    "VLLM_PLUGINS",
    "vLLM's allowlist of plugin names (every group). `anydevice run` sets it, when unset, to every installed vLLM plugin "
    "but the other vendors' platform plugins, so that only anydevice's `vllm.platform_plugins` entry picks the platform.",
    owner="vLLM",
)
VLLM_TARGET_DEVICE: Final = Setting(
    "VLLM_TARGET_DEVICE",
    "`cpu` makes vLLM take its CPU platform without asking any platform plugin, so `ANYDEVICE` is not consulted; "
    "`anydevice doctor` warns when it contradicts the selection.",
    owner="vLLM",
)
SGLANG_PLATFORM: Final = Setting(
    "SGLANG_PLATFORM",
    "The one `sglang.srt.platforms` plugin SGLang loads. `anydevice run` sets it to `anydevice` when SGLang is installed "
    "and it is unset.",
    owner="SGLang",
)
SGLANG_USE_CPU_ENGINE: Final = Setting(
    "SGLANG_USE_CPU_ENGINE",
    "`1` runs SGLang's CPU engine. anydevice's SGLang platform sets it when `ANYDEVICE` selects cpu and it is unset.",
    owner="SGLang",
)

ALL: Final[tuple[Setting, ...]] = tuple(v for v in globals().values() if isinstance(v, Setting))


def cache_dir(*parts: str) -> Path:
    """A directory under ``ANYDEVICE_CACHE_DIR`` (created on first use).

    Raises :class:`~anydevice.errors.AnyDeviceError` for a malformed ``ANYDEVICE_CACHE_DIR``
    (:func:`cache_root`), ``OSError`` when it cannot be created, ``RuntimeError`` when it is unset
    and there is no home directory (no ``HOME``, no passwd entry).
    """
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_root() -> Path:
    """``ANYDEVICE_CACHE_DIR`` (checked: absolute, or ``~``-relative, and not a file), else ``~/.cache/anydevice``."""
    root = ANYDEVICE_CACHE_DIR.get()
    if not root:
        return Path.home() / ".cache" / "anydevice"
    name = ANYDEVICE_CACHE_DIR.name
    try:
        path = Path(root).expanduser()
    except RuntimeError:  # ~user with no such user (or ~ with no home directory)
        user = root[1:].split("/", 1)[0]
        raise _error(
            f"{name}={root!r} starts with ~{user}, but "
            + (f"there is no user {user!r}." if user else "there is no home directory."),
            f"Set {name} to an absolute path such as {Path('/var/cache/anydevice')}, or unset it for ~/.cache/anydevice.",
        ) from None
    if not path.is_absolute():
        raise _error(
            f"{name}={root!r} is not an absolute path: every process (and rank) would resolve it from its own directory.",
            f"Set {name} to an absolute path such as {Path('/var/cache/anydevice')}, or unset it for ~/.cache/anydevice.",
        )
    if path.exists() and not path.is_dir():
        raise _error(f"{name}={root!r} is not a directory.", f"Point {name} at a directory, or unset it for ~/.cache/anydevice.")
    return path


def writable_cache_dir(*parts: str) -> Path:
    """Like :func:`cache_dir`, but falls back to a temporary directory, with one warning, when that is not writable.

    For compile caches: a read-only home or an unwritable ``ANYDEVICE_CACHE_DIR`` must not stop a
    compile that would work without a persistent cache. The fallback is ``anydevice-cache-<uid>``
    under the system temporary directory (reused by later runs, so caching still helps), or a fresh
    private directory when that one is not ours.
    """
    global _fallback_root
    if _fallback_root is None:
        try:
            path = cache_dir(*parts)
            _check_writable(path)
            return path
        except (OSError, RuntimeError) as exc:  # RuntimeError: Path.home() with no HOME and no passwd entry
            _fallback_root = _temporary_cache_root()
            where = ANYDEVICE_CACHE_DIR.get() or "~/.cache/anydevice"
            warnings.warn(
                f"anydevice: the compile cache directory {where} is not writable ({type(exc).__name__}: {exc}); "
                f"caching in {_fallback_root} instead: point {ANYDEVICE_CACHE_DIR.name} at a writable directory to keep it",
                RuntimeWarning,
                stacklevel=2,
            )
    path = _fallback_root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


_fallback_root: Path | None = None


def _check_writable(directory: Path) -> None:
    """Raise the OSError that writing a file in ``directory`` raises (permission bits do not stop root)."""
    import tempfile  # imported here: `import anydevice` stays cheap

    fd, name = tempfile.mkstemp(prefix=".anydevice-probe-", dir=directory)
    os.close(fd)
    os.unlink(name)


def _temporary_cache_root() -> Path:
    import tempfile

    shared = Path(tempfile.gettempdir()) / f"anydevice-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        shared.mkdir(mode=0o700, exist_ok=True)
        info = shared.lstat()
        if stat.S_ISDIR(info.st_mode) and (not hasattr(os, "getuid") or info.st_uid == os.getuid()):
            _check_writable(shared)
            return shared
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="anydevice-cache-"))  # private; raises if no temporary directory is writable


MAX_DETECT_TIMEOUT: Final = 3600.0
"""The largest ``ANYDEVICE_DETECT_TIMEOUT``: an hour (a larger value overflows the thread join it bounds)."""


def detect_timeout() -> float:
    """``ANYDEVICE_DETECT_TIMEOUT`` in seconds: above 0, at most :data:`MAX_DETECT_TIMEOUT`; else a clear error."""
    value = ANYDEVICE_DETECT_TIMEOUT.get() or "5"
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_DETECT_TIMEOUT:  # also refuses nan and inf
        name = ANYDEVICE_DETECT_TIMEOUT.name
        raise _error(
            f"{name}={value!r} is not a number of seconds above 0 and at most {MAX_DETECT_TIMEOUT:g}.",
            f"Set it to e.g. {name}=5, or unset it.",
        )
    return seconds


def _integer(setting: Setting, low: int, high: int) -> None:
    value = setting.get()
    if value is None:
        return
    if not (value.isascii() and value.isdigit() and low <= int(value) <= high):
        raise _error(
            f"{setting.name}={value!r} is not a whole number from {low} to {high}.",
            f"Fix or unset {setting.name} (it is set by {setting.owner}).",
        )


def validate() -> None:
    """Check every setting anydevice reads against its real range; the first problem raises, naming the variable.

    ``ANYDEVICE`` itself is checked when it is parsed (:func:`anydevice.runtime.selection.parse`).
    """
    detect_timeout()
    for flag in (ANYDEVICE_QUIET, ANYDEVICE_DEBUG, ANYDEVICE_KEEP_AUTOLOAD, ANYDEVICE_CUDA_COMPAT, ANYDEVICE_STRICT):
        flag.flag()
    if ANYDEVICE_CACHE_DIR.get():
        cache_root()
    _integer(ANYDEVICE_LAUNCH_PARENT, 1, 2**22)
    for rank in (LOCAL_RANK, RANK, TORCHELASTIC_RESTART_COUNT):
        _integer(rank, 0, 2**31 - 1)
    for size in (WORLD_SIZE, LOCAL_WORLD_SIZE):
        _integer(size, 1, 2**31 - 1)
    _integer(MASTER_PORT, 0, 65535)


def _rank_number(setting: Setting, default: int) -> int:
    value = setting.get()
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        from anydevice.errors import DistributedError

        raise DistributedError(f"{setting.name}={value!r} is not an integer.", "Fix or unset it.") from None


def rank() -> int:
    """The global rank a launcher gave this process (``RANK``; 0 without a launcher)."""
    return _rank_number(RANK, 0)


def local_rank() -> int:
    """The rank on this node a launcher gave this process (``LOCAL_RANK``; 0 without a launcher)."""
    return _rank_number(LOCAL_RANK, 0)


def world_size() -> int:
    """The number of processes a launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    return _rank_number(WORLD_SIZE, 1)


def allowed_plugins() -> frozenset[str] | None:
    """The plugin names ``ANYDEVICE_PLUGINS`` allows, or None for all."""
    value = ANYDEVICE_PLUGINS.get()
    if value is None:
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def markdown_table(more: Iterable[Setting] = ()) -> str:
    """The README's table of :data:`ALL` and ``more`` (the plugins' ``DeviceSpec.settings``); ``scripts/update-readme``."""
    rows = ["| variable | owner | meaning |", "|---|---|---|"]
    unique = {s.name: s for s in (*ALL, *more)}.values()
    for s in sorted(unique, key=lambda s: (s.owner != "anydevice", s.name)):
        default = f" Default: `{s.default}`." if s.default else ""
        rows.append(f"| `{s.name}` | {s.owner} | {s.doc}{default} |")
    return "\n".join(rows)
