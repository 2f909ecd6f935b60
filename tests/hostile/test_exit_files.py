"""A script ends under ``anydevice run`` exactly as under ``python`` and ``torchrun``: the files it left open are
finished by the exit, byte for byte the same, with or without a gloo group outliving the script.

One user script leaves open a gzip, zip, lzma, bz2 and tar file, a csv writer's file, an sqlite connection with an
uncommitted insert, a logging FileHandler, a numpy memmap, a custom ``io.RawIOBase`` and a file a pickle went to;
then (by mode) it ends with no process group, after DDP and a functional collective on gloo (torch 2.13 and 2.15
keep that group alive past ``destroy_process_group``: :mod:`anydevice.cli.rank_end` frees it before Python's
teardown), or with DDP held in another module's globals and the group never destroyed (the rank then ends past
the C++ teardown, closing every file first). Every rank's folder must equal ``python``'s, file by file.
TensorBoard's SummaryWriter is not in the corpus: its event file names hold the host and the time.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.distributed.helpers import anydevice_run
from tests.distributed.helpers import python as plain_python
from tests.utils import child_env, free_port

pytestmark = [pytest.mark.slow, pytest.mark.torch_version_sensitive]

CORPUS = """
import bz2, csv, gzip, io, json, logging, lzma, os, pickle, sqlite3, sys, tarfile, zipfile
import numpy as np

mode, out = sys.argv[1], os.path.join(sys.argv[2], "rank" + os.environ.get("RANK", "0"))
os.makedirs(out)
here = lambda name: os.path.join(out, name)

log_gz = io.TextIOWrapper(gzip.GzipFile(here("log.gz"), "wb", mtime=0), encoding="utf-8")  # gzip.open(..., "wt")
log_gz.write("step 1 loss 0.5\\n" * 200)
archive = zipfile.ZipFile(here("run.zip"), "w", zipfile.ZIP_DEFLATED)
archive.writestr(zipfile.ZipInfo("config.json", date_time=(2020, 1, 1, 0, 0, 0)), json.dumps({"lr": 0.1}))
notes_xz = lzma.open(here("notes.xz"), "wt")
notes_xz.write("lzma " * 100)
notes_bz2 = bz2.open(here("notes.bz2"), "wt")
notes_bz2.write("bz2 " * 100)
tar = tarfile.open(here("bundle.tar"), "w")
member = tarfile.TarInfo("a.txt"); member.size = 5; member.mtime = 0
tar.addfile(member, io.BytesIO(b"hello"))
rows = csv.writer(open(here("metrics.csv"), "w", newline=""))
rows.writerows([["step", "loss"], [1, 0.5], [2, 0.25]])
db = sqlite3.connect(here("runs.db"))
db.execute("create table runs (name text)"); db.commit()
db.execute("insert into runs values ('uncommitted')")  # Python's exit does not commit it
logger = logging.getLogger("corpus")
logger.addHandler(logging.FileHandler(here("train.log")))
logger.warning("a line the handler buffers nowhere but the file")
weights = np.memmap(here("weights.bin"), dtype="float32", mode="w+", shape=(64,))
weights[:] = np.arange(64, dtype="float32")


class Tally(io.RawIOBase):
    '''A custom raw stream over a file: it writes its parts there only when closed.'''

    def __init__(self, path):
        self.sink, self.parts = open(path, "wb"), []

    def writable(self):
        return True

    def write(self, data):
        self.parts.append(bytes(data))
        return len(data)

    def close(self):
        if not self.closed:
            self.sink.write(b"".join(self.parts) + b"|closed")
            self.sink.close()
        super().close()


tally = Tally(here("tally.bin"))
tally.write(b"counted")
state = open(here("state.pkl"), "wb")
pickle.dump({"epoch": 3, "best": [0.25, 0.125]}, state)

gloo_left = False
if mode != "plain":
    import torch, torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import corpus_holder

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    model(torch.ones(3, 4)).sum().backward()
    total = funcol.all_reduce(torch.ones(2), "sum", dist.group.WORLD).wait()
    if mode == "held":
        corpus_holder.MODEL = model  # another module's global, and the group never destroyed
    else:
        dist.destroy_process_group()
    names = {open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")}
    gloo_left = "pt_gloo_runloop" in names
print(json.dumps({"rank": int(os.environ.get("RANK", "0")), "gloo_left": gloo_left}), flush=True)
"""


def folder(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def torchrun(*args: str | Path, timeout: float) -> tuple[int, str, str]:
    import subprocess

    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    runner = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = subprocess.run([*runner, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(
    ("mode", "launches"),
    [("plain", ["run-2"]), ("released", ["torchrun-2", "run-1", "run-2"]), ("held", ["run-2"])],
)
def test_files_left_open_end_as_under_python(tmp_path: Path, mode: str, launches: list[str]) -> None:
    script = tmp_path / "corpus.py"
    script.write_text(CORPUS)
    (tmp_path / "corpus_holder.py").write_text("MODEL = None\n")
    world_of_one = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    reference = tmp_path / "python"
    result = plain_python(script, mode, reference, timeout=180, **world_of_one)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = folder(reference / "rank0")
    assert len(expected) == 11 and b"|closed" in expected["tally.bin"], sorted(expected)
    leaks = tuple(int(part) for part in __import__("torch").__version__.split(".")[:2]) >= (2, 13)
    for launch in launches:
        out = tmp_path / launch
        ranks = int(launch.rsplit("-", 1)[1])
        if launch.startswith("torchrun"):
            code, stdout, stderr = torchrun(script, mode, out, timeout=180)
        else:
            done = anydevice_run("-n", str(ranks), script, mode, out, timeout=180)
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        assert code == 0, f"{launch}: {stderr[-3000:]}"
        rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        assert sorted(row["rank"] for row in rows) == list(range(ranks)), stdout
        if mode != "plain" and leaks:  # the case this guards: gloo's threads outlive the script
            assert all(row["gloo_left"] for row in rows), f"torch frees the group now: {rows}"
        for rank in range(ranks):
            got = folder(out / f"rank{rank}")
            assert sorted(got) == sorted(expected), f"{launch} rank {rank}"
            differ = [name for name in expected if got[name] != expected[name]]
            assert not differ, f"{launch} rank {rank}: {differ} differ from python's"


def test_the_corpus_is_whole_under_python(tmp_path: Path) -> None:
    """The reference itself: Python's exit finishes every file (a corpus python broke would prove nothing)."""
    import bz2
    import gzip
    import lzma
    import pickle
    import sqlite3
    import zipfile

    script = tmp_path / "corpus.py"
    script.write_text(CORPUS)
    result = plain_python(script, "plain", tmp_path / "out", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out" / "rank0"
    assert gzip.decompress((out / "log.gz").read_bytes()).decode() == "step 1 loss 0.5\n" * 200
    assert zipfile.ZipFile(out / "run.zip").read("config.json") == b'{"lr": 0.1}'
    assert lzma.decompress((out / "notes.xz").read_bytes()) == b"lzma " * 100
    assert bz2.decompress((out / "notes.bz2").read_bytes()) == b"bz2 " * 100
    assert (out / "metrics.csv").read_bytes() == b"step,loss\r\n1,0.5\r\n2,0.25\r\n"
    with sqlite3.connect(out / "runs.db") as db:
        assert db.execute("select count(*) from runs").fetchone() == (0,)
    assert (out / "train.log").read_text() == "a line the handler buffers nowhere but the file\n"
    assert (out / "weights.bin").read_bytes() == bytes(__import__("numpy").arange(64, dtype="float32").data)
    assert (out / "tally.bin").read_bytes() == b"counted|closed"
    assert pickle.loads((out / "state.pkl").read_bytes()) == {"epoch": 3, "best": [0.25, 0.125]}
    assert os.path.getsize(out / "bundle.tar") >= 1024  # header and data; Python's exit never ends a tar archive
