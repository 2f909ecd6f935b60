"""Issue 35: a sharded checkpoint whose files are not regular files is refused by name, never a hang.

A real checkpoint written by ``ad.checkpoint.save``; one of its files (a shard, or ``.metadata``) replaced by a
FIFO, a link to ``/dev/zero`` or a directory; ``ad.checkpoint.load`` in a subprocess with a timeout (before the
fix, a FIFO shard blocked the load forever in torch's ``open``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.utils import python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md: torch's DCP reader is wrapped

SAVE = """
import sys, torch, anydevice as ad
ad.use("cpu")
torch.manual_seed(0)
ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 3}, sys.argv[1])
"""
LOAD = """
import sys, torch, anydevice as ad
from anydevice.errors import CheckpointError
ad.use("cpu")
model = torch.nn.Linear(4, 4)
try:
    ad.checkpoint.load({"model": model, "step": 0}, sys.argv[1])
except CheckpointError as exc:
    print(exc)
    sys.exit(3)
print("loaded")
"""


def plant(target: Path, what: str) -> None:
    target.unlink()
    if what == "fifo":
        os.mkfifo(target)
    elif what == "device":
        target.symlink_to("/dev/zero")
    else:
        target.mkdir()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("dcp") / "ckpt"
    done = python("-c", SAVE, str(ckpt), timeout=300)
    assert done.returncode == 0, done.stderr
    return ckpt


@pytest.mark.parametrize(
    ("what", "words"), [("fifo", "a FIFO (named pipe)"), ("device", "a character device"), ("directory", "a directory")]
)
@pytest.mark.parametrize("file", ["shard", ".metadata"])
def test_a_checkpoint_file_that_is_not_a_regular_file_is_refused_by_name(
    saved: Path, tmp_path: Path, file: str, what: str, words: str
) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved, ckpt)
    target = ckpt / ".metadata" if file == ".metadata" else next(ckpt.glob("*.distcp"))
    plant(target, what)
    done = python("-c", LOAD, str(ckpt), timeout=120)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert done.stdout.splitlines()[:2] == [
        f"Checkpoint file {target} is {words}, not a regular file; it was refused unread (reading it could block or never end).",
        "A checkpoint's files are the regular files ad.checkpoint.save wrote: replace this one, or load another checkpoint.",
    ]


def test_the_untouched_checkpoint_still_loads(saved: Path) -> None:
    done = python("-c", LOAD, str(saved), timeout=120)
    assert done.returncode == 0 and done.stdout == "loaded\n", done.stderr
