"""Issue 11, checkpoints: each hostile input and the exact outcome, plus a loop of real SIGKILLs during saves.

ad.save / ad.load run in this process on cpu; killed and concurrent savers are real subprocesses,
and the collective cases real 2-rank `anydevice run` launches over gloo.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import CheckpointError
from anydevice.shims import saving
from tests.distributed.helpers import WORKERS, anydevice_run
from tests.utils import child_env

SAVER = """
import sys, torch, anydevice as ad
path, version = sys.argv[1], int(sys.argv[2])
weights = torch.randn(4_000_000)  # 16 MB: most of the loop's time is spent writing
print("ready", flush=True)
while True:
    version += 1
    ad.save({"version": version, "weights": weights}, path)
"""


@pytest.fixture(autouse=True)
def cpu() -> None:
    ad.use("cpu")


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


def dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(child.stdout)


def test_rank_variable_without_a_process_group_still_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # hostile: a stray RANK, no launcher, no process group
    ad.save({"x": torch.ones(2)}, tmp_path / "ckpt.pt")
    assert torch.equal(ad.load(tmp_path / "ckpt.pt")["x"], torch.ones(2))


def test_stale_temporaries_of_killed_saves_are_removed_by_the_next_save(tmp_path):
    host = socket.gethostname()
    dead = tmp_path / f".ckpt.pt.{dead_pid()}@{host}.0123abcd.tmp"  # what a save killed mid-write leaves
    dead_other_name = tmp_path / f".other.pt.{dead_pid()}@{host}.89abcdef.tmp"
    old_legacy = tmp_path / ".ckpt.pt.k2j4_x9q.tmp"  # tempfile.mkstemp's name, from anydevice 0.1.0, 2 hours old
    fresh_legacy = tmp_path / ".ckpt.pt.a8b7c6d5.tmp"  # may belong to a live 0.1.0 writer: kept until stale
    unrelated = tmp_path / ".notes.tmp"  # not ours
    for path in (dead, dead_other_name, old_legacy, fresh_legacy, unrelated):
        path.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(old_legacy, (two_hours_ago, two_hours_ago))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_temp = tmp_path / f".ckpt.pt.{live.pid}@{host}.fedcba98.tmp"  # a concurrent saver still writing
        live_temp.write_bytes(b"partial")
        ad.save({"x": 1}, tmp_path / "ckpt.pt")
        assert temps(tmp_path) == sorted([fresh_legacy.name, live_temp.name, unrelated.name])
    finally:
        live.kill()
        live.wait()
    assert ad.load(tmp_path / "ckpt.pt") == {"x": 1}


def test_concurrent_savers_in_one_directory_do_not_break_each_other(tmp_path):
    script = "import sys, torch, anydevice as ad\nfor i in range(25): ad.save({'i': i, 'w': torch.randn(500_000)}, sys.argv[1])\n"
    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    savers = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"{n}.pt")], env=env, stderr=subprocess.PIPE, text=True)
        for n in "ab"
    ]
    errors = [p.communicate(timeout=300)[1] for p in savers]
    assert [p.returncode for p in savers] == [0, 0], errors
    assert [ad.load(tmp_path / f"{n}.pt")["i"] for n in "ab"] == [24, 24]
    assert temps(tmp_path) == []


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_saved_file_gets_the_umask_mode(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        ad.save({"x": 1}, tmp_path / "ckpt.pt")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "ckpt.pt").stat().st_mode) == mode  # was 0600 whatever the umask


def test_saving_through_a_symlink_updates_its_target_and_keeps_the_link(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "step-10.pt"
    ad.save({"step": 10}, target)
    link = tmp_path / "latest.pt"
    link.symlink_to(target)
    ad.save({"step": 20}, link)
    assert link.is_symlink() and link.resolve() == target
    assert ad.load(target) == {"step": 20}
    assert temps(tmp_path) == [] and temps(tmp_path / "runs") == []


def test_the_directory_is_fsynced_after_the_rename(tmp_path, monkeypatch):
    real_fsync, synced = os.fsync, []

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append(("dir" if stat.S_ISDIR(st.st_mode) else "file", (tmp_path / "ckpt.pt").exists()))
        real_fsync(fd)

    monkeypatch.setattr(saving.os, "fsync", spy)  # a spy on the syscall: the real fsync still runs
    ad.save({"x": 1}, tmp_path / "ckpt.pt")
    assert synced == [("file", False), ("dir", True)]  # the data before the rename, the directory after it


def test_loading_an_empty_file_says_it_is_empty(tmp_path):
    path = tmp_path / "step-30.pt"
    path.touch()
    with pytest.raises(CheckpointError) as info:
        ad.load(path)
    assert str(info.value).splitlines()[0] == f"Checkpoint {path} is empty (0 bytes): it was never written completely."


@pytest.mark.parametrize("seed", range(8))
def test_loading_random_bytes_says_corrupt_and_never_advises_weights_only_false(tmp_path, seed):
    path = tmp_path / "step-30.pt"
    path.write_bytes(random.Random(seed).randbytes(random.Random(seed).choice([1, 7, 100, 5000])))
    with pytest.raises(CheckpointError) as info:
        ad.load(path)
    assert str(info.value).startswith(f"Checkpoint {path} is corrupt or truncated (")
    assert "weights_only" not in str(info.value)


def test_loading_a_truncated_checkpoint_says_corrupt(tmp_path):
    path = tmp_path / "step-30.pt"
    ad.save({"w": torch.randn(1000)}, path)
    path.write_bytes(path.read_bytes()[:-300])  # a copy cut short
    with pytest.raises(CheckpointError, match=r"is corrupt or truncated \(") as info:
        ad.load(path)
    assert str(path) in str(info.value) and "weights_only" not in str(info.value)


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_is_refused_without_advising_weights_only_false(tmp_path):
    marker, path = tmp_path / "pwned", tmp_path / "step-30.pt"
    torch.save({"model": Payload(marker)}, path)
    with pytest.raises(CheckpointError) as info:
        ad.load(path)
    message = str(info.value)
    assert message.startswith(f"Checkpoint {path} was refused: it needs ")
    assert "system" in message.splitlines()[0] and "weights_only" not in message
    assert not marker.exists()


def test_a_missing_file_is_the_os_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothing\.pt"):
        ad.load(tmp_path / "nothing.pt")


@pytest.mark.slow
def test_ten_sigkills_during_saves_never_lose_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ckpt.pt"
    ad.save({"version": 0, "weights": torch.zeros(4_000_000)}, path)
    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    rng, version, left_behind = random.Random(11), 0, []
    for kill in range(10):
        command = [sys.executable, "-c", SAVER, str(path), str(1000 * (kill + 1))]
        saver = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        assert saver.stdout is not None and saver.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 1.5))
        saver.send_signal(signal.SIGKILL)
        assert saver.wait(timeout=60) == -signal.SIGKILL
        saver.stdout.close()
        state = ad.load(path)  # the previous checkpoint, or the one that finished just before the kill
        assert state["version"] >= version and state["weights"].shape == (4_000_000,)
        version = state["version"]
        left_behind.append(len(temps(tmp_path)))
        ad.save({"version": version, "weights": state["weights"]}, path)  # the next save cleans up
        assert temps(tmp_path) == []
    assert sum(left_behind) >= 1, "no kill landed mid-write: the loop tested nothing"


@pytest.mark.slow
def test_save_then_load_on_a_shared_path_passes_20_of_20_on_2_ranks(tmp_path):
    run = anydevice_run("-n", "2", WORKERS / "save_then_load.py", tmp_path, "20", timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.by_rank() == {r: {"rank": r, "rounds": 20, "ok": 20} for r in (0, 1)}


@pytest.mark.slow
def test_a_save_failing_on_the_main_rank_raises_on_every_rank_instead_of_hanging(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the checkpoint's directory should be")
    run = anydevice_run("-n", "2", WORKERS / "save_fails_on_main.py", blocker / "ckpt.pt", timeout=180)
    assert run.returncode == 0, run.stderr
    rows = run.by_rank()
    assert rows[0]["error"].startswith(("FileExistsError", "NotADirectoryError"))
    expected = f"CheckpointError: Rank 0 failed to save {blocker / 'ckpt.pt'}, so this rank did not continue."
    assert rows[1]["error"] == expected
