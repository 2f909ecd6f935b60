"""How one rank starts: it dies with its launcher, gets ``sys.path[0]`` as ``python`` gives it, runs the script.

``anydevice run`` of one process runs this file by its path (``python .../rank_start.py TARGET KIND
PATH0 ARGS...``), so a rank imports no torch before the script does, and of anydevice only the script runner
(:mod:`anydevice.runtime.script_main`, standard library only): the start-up costs what ``python script.py``
costs. Under torch elastic (:mod:`anydevice.cli.launch`) a rank runs the same :func:`run` after its per-rank
variables.
The script's namespace stays ``__main__`` after it ends, until the interpreter ends, as under ``python``
(:func:`anydevice.runtime.script_main.run_as_main`); a rank that succeeded while torch's gloo threads
outlive its process group frees that group before Python's teardown (:mod:`.rank_end`).

Imported only when needed: cuda-compat (``ANYDEVICE_CUDA_COMPAT``) before the script, the
Hugging Face hook (:mod:`anydevice.integrations._hf`) at the first import of Transformers,
Accelerate or Diffusers, and the first-step check of the device's use (:mod:`anydevice.cli.device_use`)
once torch is imported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType, TracebackType

LAUNCH_PARENT = "ANYDEVICE_LAUNCH_PARENT"
"""The launcher's pid, set for its ranks (``anydevice.settings.ANYDEVICE_LAUNCH_PARENT``)."""
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
INTERRUPTED = 128 + signal.SIGINT  # the shell's status for a process ended by Ctrl-C
HF_LIBRARIES = ("transformers", "accelerate", "diffusers")
"""Libraries whose first import brings in the Hugging Face hook (``anydevice.integrations._hf.WATCHED``)."""


def die_with_parent() -> None:
    """Make this rank end when the launcher that started it ends (no-op outside ``anydevice run``)."""
    value = os.environ.get(LAUNCH_PARENT, "").strip()
    if not value.isdigit():
        return
    parent = int(value)
    if not parent_death_signal():
        _watch(parent)  # not Linux, or prctl refused (seccomp): poll instead
    if os.getppid() != parent:  # the launcher died before the line above took effect
        os._exit(1)


def parent_death_signal() -> bool:
    """Ask the kernel to SIGKILL this process when its parent ends, even by ``kill -9`` (Linux); False if it cannot.

    Also safe between ``fork`` and ``exec`` (``subprocess.Popen(preexec_fn=...)``): the setting survives ``exec``.
    """
    if not sys.platform.startswith("linux"):
        return False
    return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)


def _watch(parent: int) -> None:
    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=poll, name="anydevice-parent-watch", daemon=True).start()


@contextmanager
def quiet_interrupt() -> Iterator[None]:
    """Turn a KeyboardInterrupt that escapes the block into exit status 130, without a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.flush()
        raise SystemExit(INTERRUPTED) from None


class _HfOnFirstImport:
    """At the first import of a Hugging Face library: install anydevice's hook for it (then step aside).

    A plain meta-path finder (``find_spec`` only): ``importlib.abc`` would cost the rank ~0.1 s of imports.
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname in HF_LIBRARIES:
            sys.meta_path.remove(self)
            from anydevice.integrations import _hf

            _hf.install_in_rank()
        return None


class _ThenWatch:
    """torch's own loader, then :func:`watch_first_step` once torch has loaded (:class:`_WatchOnTorchImport`)."""

    def __init__(self, loader: Any, finder: _WatchOnTorchImport) -> None:
        self.loader = loader
        self.finder = finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # torch sees its own loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.finder.leave()
        self.loader.exec_module(module)
        watch_first_step()


class _WatchOnTorchImport:
    """At the import of torch: once it has loaded, :func:`watch_first_step` (then step aside).

    ``find_spec`` runs before torch loads, so it finds torch's spec with the other finders and wraps its
    loader (:class:`_ThenWatch`): the wrapper puts the real loader back on the module, runs it, then
    installs the check. A probe (``importlib.util.find_spec("torch")``, as datasets and transformers make
    at import) gets the same spec and loads nothing: the finder stays until torch is loaded. A plain
    finder, as :class:`_HfOnFirstImport`.
    """

    def __init__(self) -> None:
        self.finding = False  # its own lookup of torch's spec passes through it

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != "torch" or self.finding:
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = cast("Loader", _ThenWatch(spec.loader, self))
        return spec

    def leave(self) -> None:
        """Out of ``sys.meta_path`` (once torch loads; already out is fine)."""
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def cuda_compat_asked() -> bool:
    """Whether ``ANYDEVICE_CUDA_COMPAT`` is set to something other than 0 (read without importing anydevice)."""
    return os.environ.get("ANYDEVICE_CUDA_COMPAT", "").strip() not in ("", "0")


def asked_on_rank0() -> str | None:
    """``ANYDEVICE`` on rank 0 when it is set (what :mod:`.device_use` checks), else None."""
    asked = os.environ.get("ANYDEVICE", "")
    return asked if asked.strip() and os.environ.get("RANK", "0") == "0" else None


def watch_first_step() -> None:
    """Say at the first step (backward pass or optimizer step) when the device asked for is not used (:mod:`.device_use`);
    torch is imported."""
    asked = asked_on_rank0()
    if asked is None:
        return
    try:
        from anydevice.cli.device_use import watch_first_step as watch

        watch(asked, cuda_compat_asked())
    except Exception:  # the program's import of torch is what matters
        pass


def refusals_hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """``sys.excepthook`` of a rank: an anydevice error the script did not catch prints as one clear error
    (:mod:`anydevice.runtime.refusals`, imported only then); anything else as Python prints it."""
    errors = sys.modules.get("anydevice.errors")
    if errors is not None and isinstance(value, errors.AnyDeviceError):
        from anydevice.runtime import refusals

        refusals.excepthook(kind, value, tb, sys.__excepthook__)
        return
    sys.__excepthook__(kind, value, tb)


def check_module(name: str) -> None:
    """End the rank as ``python -m`` does (one line, status 1) when there is no module ``name``."""
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        sys.stderr.write(f"anydevice run: No module named {name}\n")
        raise SystemExit(1)


def run(target: str, args: list[str], is_module: bool = False, path0: str | None = None) -> None:
    """Run ``target`` (a script's path, or a module as ``python -m`` does) as ``__main__`` in this rank."""
    die_with_parent()
    if any(importlib.util.find_spec(name) is not None for name in HF_LIBRARIES):
        sys.meta_path.insert(0, _HfOnFirstImport())
    sys.path[0] = path0 or (os.getcwd() if is_module else os.path.dirname(os.path.realpath(target)))
    sys.argv = [target, *args]  # run_module sets argv[0] to the module's file, as python -m does
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = refusals_hook
    with quiet_interrupt():
        if os.environ.get("ANYDEVICE_CUDA_COMPAT", "").strip():
            from anydevice import settings

            if settings.ANYDEVICE_CUDA_COMPAT.flag():
                import torch  # noqa: F401 - first: the interpreter's cuda-compat start-up hook acts on torch's import

                from anydevice import cuda_compat

                cuda_compat.enable()  # before the script runs: redirects CUDA calls (idempotent)
        from anydevice import device_agnostic  # standard library only: acts at the script's first import of torch

        device_agnostic.install()  # torch.accelerator answers for the selected device (nothing where cuda-compat is on)
        if "torch" in sys.modules:
            watch_first_step()
        elif asked_on_rank0() is not None:
            sys.meta_path.insert(0, _WatchOnTorchImport())
        from anydevice.runtime.script_main import run_as_main  # standard library only

        ended_well = False
        try:
            run_as_main(target, is_module, check_module)
            ended_well = True
        except SystemExit as exc:
            ended_well = exc.code in (None, 0)
            raise
        finally:
            say_if_device_unused(ended_well)


def say_if_device_unused(ended_well: bool = True) -> None:
    """At the rank's end: one line on rank 0 when the device ``ANYDEVICE`` asked for was never used and the
    first step did not say so, or, when the program ended well, when it never stepped (:mod:`.device_use`)."""
    asked = asked_on_rank0()
    if asked is None:
        return
    from anydevice.cli.device_use import exit_line

    try:
        line = exit_line(asked, cuda_compat_asked(), ended_well)
    except Exception as exc:  # the script's own outcome is what the rank ends with
        line = f"anydevice: could not tell whether ANYDEVICE={asked.strip()} was used: {exc}"
    if line:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):  # stderr closed (2>&-) or None: the script's outcome stands
            pass


if __name__ == "__main__":
    sys.path[0] = sys.argv[3]  # first: nothing is imported from this file's folder
    try:
        run(sys.argv[1], sys.argv[4:], sys.argv[2] == "module", sys.argv[3])
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    from anydevice.cli import rank_end

    rank_end.finish()  # frees a gloo group that outlives the script before Python's teardown (rank_end)
