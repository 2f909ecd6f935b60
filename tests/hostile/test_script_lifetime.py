"""A rank's script objects live until the interpreter ends, as under ``python script.py`` and torchrun.

``anydevice run`` ran the script with runpy, whose ``__main__`` lasts only as long as the run: the script's
globals were then garbage, finalized by the next collection, in whichever thread ran it, before the exit handlers.
A timm run whose persistent DataLoader outlived the script then hung at exit in some runs (rank 0 in a futex wait,
its workers alive); under torchrun the DataLoader is finalized at the interpreter's end, after multiprocessing's
exit handler has ended the workers. Here a thread collects garbage once the main thread is done (what any
allocation may do), and each script says when its objects were finalized.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.helpers import Result, anydevice_run

EXIT_ORDER = """
import atexit, gc, os, threading

handlers_ran = False


def _mark():
    global handlers_ran
    handlers_ran = True


atexit.register(_mark)


def say(what, late=None):
    when = "late" if (handlers_ran if late is None else late) else "early"
    os.write(1, f"{what} {os.environ.get('RANK', '0')} {when} {threading.current_thread().name}\\n".encode())


def _collect():
    threading.main_thread().join()  # the main thread is at the interpreter's end: the script and its runner are done
    gc.collect()


def watch_dataloaders():
    # say when a DataLoader shuts its workers down: "late" once Python's exit has begun (torch's own flag)
    from torch.utils.data import _utils, dataloader

    iterator = dataloader._MultiProcessingDataLoaderIter
    shutdown = iterator._shutdown_workers

    def said(self):
        say("loader", late=_utils.python_exit_status)
        shutdown(self)

    iterator._shutdown_workers = said


threading.Thread(target=_collect, name="collector").start()
"""

HELD = """
import sys
import exit_order


class Held:
    def __del__(self, say=exit_order.say):  # bound now: the script's globals may be cleared when this runs
        say("finalized")


held = Held()
if sys.argv[1:] == ["exit"]:
    sys.exit(0)
if sys.argv[1:] == ["raise"]:
    raise ValueError("the script failed")
"""

LOADER = """
import exit_order
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

exit_order.watch_dataloaders()
dist.init_process_group("nccl")
model = torch.nn.Linear(4, 1).cuda()
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True, pin_memory=True)
for epoch in range(2):
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
batches = iter(loader)
next(batches)
dist.destroy_process_group()
"""


def _run(tmp_path: Path, script: str, options: list[str], args: list[str]) -> Result:
    """``anydevice run OPTIONS script.py ARGS`` of ``script``, with the ``exit_order`` module next to it."""
    (tmp_path / "exit_order.py").write_text(EXIT_ORDER)
    path = tmp_path / "script.py"
    path.write_text(script)
    return anydevice_run(*options, path, *args, timeout=120)


def _lines(result: Result, what: str) -> list[str]:
    return sorted(line for line in result.stdout.splitlines() if line.startswith(what + " "))


@pytest.mark.parametrize(("nproc", "how", "code"), [("1", "return", 0), ("1", "raise", 1), ("2", "return", 0), ("2", "exit", 0)])
def test_script_globals_are_finalized_after_the_exit_handlers(tmp_path: Path, nproc: str, how: str, code: int) -> None:
    result = _run(tmp_path, HELD, ["-n", nproc], [how])
    assert result.returncode == code, result.stderr[-2000:]
    assert _lines(result, "finalized") == [f"finalized {rank} late MainThread" for rank in range(int(nproc))]


def test_a_live_dataloader_ends_at_the_interpreters_end_as_under_torchrun(tmp_path: Path) -> None:
    result = _run(tmp_path, LOADER, ["-n", "2", "--cuda-compat"], [])
    assert result.returncode == 0, result.stderr[-2000:]
    assert _lines(result, "loader") == ["loader 0 late MainThread", "loader 1 late MainThread"]
