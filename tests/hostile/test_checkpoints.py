"""Issues 11 and 18, checkpoints: each hostile input and the exact outcome, plus loops of real SIGKILLs during saves.

ad.save / ad.load / ad.checkpoint run in this process on cpu; killed and concurrent savers are real
subprocesses (one in its own PID namespace; the SIGKILL loops fork each saver from one interpreter that imported
torch once), the collective cases real 2-rank `anydevice run`
launches over gloo. Cases that need root (planted links owned by another uid, a full tmpfs, an
immutable directory) are skipped without it.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import CheckpointError
from anydevice.files import publish
from anydevice.files.safe_place import open_place
from tests.distributed.helpers import WORKERS, anydevice_run
from tests.utils import child_env

SAVER = """
def save_loop(path, version):
    version = int(version)
    weights = torch.randn(4_000_000)  # 16 MB: most of the loop's time is spent writing
    ready()
    while True:
        version += 1
        ad.save({"version": version, "weights": weights}, path)
"""

FORK_SERVER = """
import os, sys, torch, anydevice as ad
import torch.distributed.checkpoint  # what ad.checkpoint.save imports, imported once
torch.set_num_threads(1)
def ready():
    os.write(1, f"ready {os.getpid()}\\n".encode())
SAVE_LOOP
while line := sys.stdin.readline():  # one saver per line (its arguments), run until it is killed
    pid = os.fork()
    if pid == 0:
        try:
            save_loop(*line.split())
        finally:
            os._exit(1)
    os.write(1, f"ended {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}\\n".encode())
"""


class ForkServer:
    """One interpreter that imports torch and anydevice once and forks a saver per :meth:`start`.

    A forked saver SIGKILLed mid-save leaves the files as a killed fresh process would (the kernel ends it
    the same way; the loop under test only runs in the child), without paying an interpreter and
    ``import torch`` for each kill.
    """

    def __init__(self, save_loop: str, env: dict[str, str]) -> None:
        script = FORK_SERVER.replace("SAVE_LOOP", save_loop)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def start(self, *args: object) -> int:
        """A new saver with these arguments; returns its pid once it says it is ready."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, args)) + "\n")
        self.proc.stdin.flush()
        word, _, pid = self._line().partition(" ")
        assert word == "ready", f"the saver did not start: {word} {pid}"
        return int(pid)

    def kill(self, pid: int) -> int:
        """SIGKILL the saver; returns its exit status as the server saw it (-9)."""
        os.kill(pid, signal.SIGKILL)
        word, _, status = self._line().partition(" ")
        assert word == "ended", word
        return int(status)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


@pytest.fixture(autouse=True)
def cpu() -> None:
    ad.use("cpu")


ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown of a link, mount, chattr)")


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".anydevice-" in p.name or p.name.endswith(".tmp"))


def tree(directory: Path) -> dict[str, bytes | None]:
    """Every entry under ``directory`` with its bytes (None for directories and links): what 'untouched' compares."""
    return {
        str(p.relative_to(directory)): None if p.is_dir() or p.is_symlink() else p.read_bytes()
        for p in sorted(directory.rglob("*"))
    }


def checkpoint_step(directory: Path) -> int:
    return int(ad.checkpoint.load({"step": -1}, directory)["step"])


def test_rank_variable_without_a_process_group_still_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # hostile: a stray RANK, no launcher, no process group
    ad.save({"x": torch.ones(2)}, tmp_path / "ckpt.pt")
    assert torch.equal(ad.load(tmp_path / "ckpt.pt")["x"], torch.ones(2))


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)  # what a live anydevice writer holds on its temporary
os.write(fd, b"partial checkpoint")
print(os.getpid(), flush=True)
time.sleep(120)
"""


def wait_until_unlocked(path: Path, timeout: float = 30.0) -> None:
    """Block until the holder's lock on ``path`` is gone (its process has exited)."""
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                assert time.monotonic() < deadline, f"{path} still locked after {timeout} s"
                time.sleep(0.05)
    finally:
        os.close(fd)


def test_stale_temporaries_are_removed_only_when_ours_and_their_writer_is_dead(tmp_path):
    dead = tmp_path / publish.temp_name("ckpt.pt")  # a save killed mid-write: unlocked, not empty
    dead.write_bytes(b"partial")
    dead_dir = tmp_path / publish.temp_name("c")  # a killed ad.checkpoint.save
    dead_dir.mkdir()
    (dead_dir / publish.MARKER).write_bytes(b"anydevice checkpoint")
    (dead_dir / "__0_0.distcp").write_bytes(b"x" * 1000)
    two_hours_ago = time.time() - 7200
    others = [tmp_path / n for n in (".notes.tmp", ".ckpt.pt.k2j4_x9q.tmp", ".ckpt.pt.a8b7c6d5.tmp", ".x.anydevice-tmp.zz")]
    for other in others:  # other tools' hidden temporaries, even old ones, and a near miss of our pattern
        other.write_bytes(b"not ours")
        os.utime(other, (two_hours_ago, two_hours_ago))
    live = tmp_path / publish.temp_name("ckpt.pt")
    command = [sys.executable, "-c", HOLDER, str(live)]
    if os.geteuid() == 0:  # the live writer in another PID namespace: its PID means nothing here
        command = ["unshare", "--pid", "--fork", "--kill-child", *command]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and int(holder.stdout.readline()) > 0
        ad.save({"x": 1}, tmp_path / "ckpt.pt")
        assert temps(tmp_path) == sorted([live.name, *(o.name for o in others)])
        assert live.read_bytes() == b"partial checkpoint"
    finally:
        holder.kill()  # unshare's child gets SIGKILL from the kernel when unshare dies (--kill-child)
        holder.wait()
        holder.stdout.close()
    wait_until_unlocked(live)
    ad.save({"x": 2}, tmp_path / "ckpt.pt")  # its writer is dead now: removed
    assert temps(tmp_path) == sorted(o.name for o in others)
    assert ad.load(tmp_path / "ckpt.pt") == {"x": 2}


def test_a_temporary_not_yet_locked_is_kept_while_a_writer_is_naming_one_and_swept_once_none_is(tmp_path):
    young = tmp_path / publish.temp_name("ckpt.pt", kind="new")  # a writer between open and flock looks like this
    young.touch()
    naming = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)  # a live writer in that instant holds this shared
    try:
        fcntl.flock(naming, fcntl.LOCK_SH)
        ad.save({"x": 1}, tmp_path / "ckpt.pt")  # the save's own naming shares the lock and goes on
        assert temps(tmp_path) == [young.name]
    finally:
        os.close(naming)
    ad.save({"x": 2}, tmp_path / "ckpt.pt")  # no writer is naming: the -new one's writer died in that instant
    assert temps(tmp_path) == []
    assert ad.load(tmp_path / "ckpt.pt") == {"x": 2}


def test_a_directory_checkpoints_writer_killed_before_its_lock_leaves_nothing_after_the_next_save(tmp_path):
    ad.checkpoint.save({"step": 1}, tmp_path / "c")
    killed = tmp_path / publish.temp_name("c", kind="new")  # killed after creating its marker, before locking it
    killed.mkdir()
    (killed / publish.MARKER).touch()
    ad.checkpoint.save({"step": 2}, tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    assert ad.checkpoint.load({"step": 0}, tmp_path / "c")["step"] == 2


def test_where_the_directory_cannot_be_locked_a_temporary_not_yet_locked_gets_a_grace_period(tmp_path, monkeypatch):
    monkeypatch.setattr(publish, "_open_directory", lambda dir_fd: None)
    young = tmp_path / publish.temp_name("ckpt.pt", kind="new")
    young.touch()
    ad.save({"x": 1}, tmp_path / "ckpt.pt")
    assert temps(tmp_path) == [young.name]
    old = time.time() - 2 * publish.GRACE_S
    os.utime(young, (old, old))
    ad.save({"x": 1}, tmp_path / "ckpt.pt")
    assert temps(tmp_path) == []


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

    monkeypatch.setattr(publish.os, "fsync", spy)  # a spy on the syscall: the real fsync still runs
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
@pytest.mark.long("ten savers killed mid-save, each forked from one interpreter")
def test_ten_sigkills_during_saves_never_lose_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ckpt.pt"
    ad.save({"version": 0, "weights": torch.zeros(4_000_000)}, path)
    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    rng, version, left_behind = random.Random(11), 0, []
    savers = ForkServer(SAVER, env)
    for kill in range(10):
        saver = savers.start(path, 1000 * (kill + 1))
        time.sleep(rng.uniform(0.0, 1.5))
        assert savers.kill(saver) == -signal.SIGKILL
        state = ad.load(path)  # the previous checkpoint, or the one that finished just before the kill
        assert state["version"] >= version and state["weights"].shape == (4_000_000,)
        version = state["version"]
        left_behind.append(len(temps(tmp_path)))
        ad.save({"version": version, "weights": state["weights"]}, path)  # the next save cleans up
        assert temps(tmp_path) == []
    savers.close()
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
    assert (
        rows[0]["error"]
        == f"CheckpointError: Cannot save {blocker / 'ckpt.pt'}: a part of the path is not a directory ({blocker})."
    )
    expected = f"CheckpointError: Rank 0 failed to save {blocker / 'ckpt.pt'}, so this rank did not continue."
    assert rows[1]["error"] == expected


# -- issue 18: a save never deletes or replaces what it did not create ---------------------------------


def test_a_directory_that_is_not_a_checkpoint_is_an_error_and_is_left_untouched(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "runs" / "a").mkdir(parents=True)
    (ckpt / "notes.txt").write_text("my notes")
    (ckpt / "runs" / "a" / "log").write_text("loss 1.0")
    ad.save({"step": 100}, ckpt / "step-100.pt")
    before = tree(ckpt)
    with pytest.raises(CheckpointError) as info:
        ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, ckpt)
    assert str(info.value).startswith(f"Cannot save checkpoint {ckpt}: it holds notes.txt, runs, step-100.pt, which")
    assert tree(ckpt) == before and temps(tmp_path) == []


def test_a_file_where_a_directory_checkpoint_goes_is_an_error_and_is_kept(tmp_path):
    path = tmp_path / "ckpt"
    path.write_text("a file")
    with pytest.raises(CheckpointError, match=r"^Cannot save checkpoint .*ckpt: it is not a directory; nothing in it"):
        ad.checkpoint.save({"model": torch.nn.Linear(4, 4)}, path)
    assert path.read_text() == "a file" and temps(tmp_path) == []


def test_an_empty_directory_and_an_earlier_checkpoint_are_replaced(tmp_path):
    (tmp_path / "c").mkdir()
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, tmp_path / "c")
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 2}, tmp_path / "c")
    assert checkpoint_step(tmp_path / "c") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"] and (tmp_path / "c" / publish.MARKER).is_file()


@pytest.mark.parametrize("content", [b"my notes\n", b"\x89PNG\r\n\x1a\n...."])
def test_ad_save_refuses_to_replace_a_file_that_is_not_a_checkpoint(tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(
        CheckpointError, match=r"the file there looks like (a text file|a PNG image), not a checkpoint; it was left as it was"
    ):
        ad.save({"x": 1}, path)
    assert path.read_bytes() == content and temps(tmp_path) == []


def test_ad_save_on_a_directory_is_an_error_naming_it(tmp_path):
    (tmp_path / "ckpt.pt").mkdir()
    with pytest.raises(CheckpointError, match=r"ckpt\.pt: it is a directory; it was left as it was"):
        ad.save({"x": 1}, tmp_path / "ckpt.pt")


def test_ad_save_refuses_a_file_the_user_made_read_only(tmp_path):
    path = tmp_path / "best.pt"
    ad.save({"step": 1}, path)
    before = path.read_bytes()
    path.chmod(0o444)
    with pytest.raises(CheckpointError) as info:
        ad.save({"step": 2}, path)
    assert str(info.value).splitlines()[0] == f"Cannot save {path}: the file is read-only (mode 0444); it was left as it was."
    assert path.read_bytes() == before and temps(tmp_path) == []


@ROOT
def test_a_writable_file_in_a_directory_that_cannot_change_is_rewritten_in_place(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    ad.save({"step": 1}, locked / "ckpt.pt")
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        ad.save({"step": 2, "w": torch.arange(5.0)}, locked / "ckpt.pt")  # no temporary can be created there
        with pytest.raises(CheckpointError, match=r"^Cannot save .*new\.pt: permission denied"):
            ad.save({"x": 1}, locked / "new.pt")  # nothing to rewrite: a clear error
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    loaded = ad.load(locked / "ckpt.pt")
    assert loaded["step"] == 2 and torch.equal(loaded["w"], torch.arange(5.0))
    assert [p.name for p in locked.iterdir()] == ["ckpt.pt"]


@ROOT
def test_a_hard_linked_file_in_a_directory_that_cannot_change_is_refused_not_written_through(tmp_path):
    # issue 35: the in-place rewrite changed the file's other name too (a copy the user kept by `ln`).
    locked = tmp_path / "locked"
    locked.mkdir()
    ad.save({"step": 1}, locked / "ckpt.pt")
    kept = tmp_path / "kept.pt"
    os.link(locked / "ckpt.pt", kept)
    before = kept.read_bytes()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        with pytest.raises(CheckpointError) as info:
            ad.save({"step": 2}, locked / "ckpt.pt")
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert str(info.value).splitlines()[0] == (
        f"Cannot save {locked / 'ckpt.pt'}: its directory cannot be written, so the file would be rewritten in place, "
        "but it has 1 other hard link, which would change with it; it was left as it was."
    )
    assert kept.read_bytes() == before and (locked / "ckpt.pt").read_bytes() == before


# -- links planted by another user ------------------------------------------------------------------


def shared_dir(tmp_path: Path) -> Path:
    sh = tmp_path / "sh"
    sh.mkdir()
    sh.chmod(0o1777)  # sticky and world-writable, like /tmp
    return sh


def plant(link: Path, target: Path, uid: int = 65534) -> None:
    link.symlink_to(target)
    os.lchown(link, uid, uid)


@ROOT
def test_a_planted_link_to_a_file_in_a_shared_directory_is_refused(tmp_path):
    victim = tmp_path / "victim.pt"
    victim.write_bytes(b"PK\x03\x04 the victim's own checkpoint")
    plant(shared_dir(tmp_path) / "m.pt", victim)
    with pytest.raises(CheckpointError) as info:
        ad.save({"x": 1}, tmp_path / "sh" / "m.pt")
    assert str(info.value).startswith(f"Refusing to save through {tmp_path / 'sh' / 'm.pt'}: it is a symbolic link owned by")
    assert "(uid 65534)" in str(info.value)
    assert victim.read_bytes() == b"PK\x03\x04 the victim's own checkpoint"
    assert (tmp_path / "sh" / "m.pt").is_symlink() and temps(tmp_path / "sh") == []


@ROOT
def test_a_planted_link_to_a_directory_is_refused_and_its_files_are_kept(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 5}, victim / "c")  # even a real checkpoint
    (victim / "data.bin").write_bytes(b"precious")
    before = tree(victim)
    sh = shared_dir(tmp_path)
    plant(sh / "ckpt", victim / "c")
    plant(sh / "sub", victim)
    with pytest.raises(CheckpointError, match="Refusing to save through"):
        ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 6}, sh / "ckpt")
    with pytest.raises(CheckpointError, match="Refusing to save through"):
        ad.save({"x": 1}, sh / "sub" / "data.bin")  # a planted link as a directory on the way
    with pytest.raises(CheckpointError, match="Refusing to save through"):
        ad.checkpoint.save({"model": torch.nn.Linear(4, 4)}, sh / "sub" / "c")
    assert tree(victim) == before and checkpoint_step(victim / "c") == 5
    assert sorted(p.name for p in sh.iterdir()) == ["ckpt", "sub"]


@ROOT
def test_a_link_in_another_users_directory_inside_a_shared_one_is_refused(tmp_path):
    victim = tmp_path / "victim"
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 5}, victim)
    before = tree(victim)
    theirs = shared_dir(tmp_path) / "theirs"  # made in /tmp by another user: they own it, they control its names
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    plant(theirs / "ckpt", victim)
    with pytest.raises(CheckpointError, match=r"Refusing to save through .*theirs/ckpt: it is a symbolic link owned by"):
        ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 6}, theirs / "ckpt")
    assert tree(victim) == before and checkpoint_step(victim) == 5


@ROOT
def test_our_own_link_in_a_shared_directory_is_followed(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "latest.pt"
    ad.save({"step": 1}, target)
    sh = shared_dir(tmp_path)
    (sh / "latest.pt").symlink_to(target)  # owned by this user
    ad.save({"step": 2}, sh / "latest.pt")
    assert (sh / "latest.pt").is_symlink() and ad.load(target) == {"step": 2}


def test_saving_a_directory_checkpoint_through_our_own_link_updates_its_target(tmp_path):
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, tmp_path / "step-1")
    (tmp_path / "latest").symlink_to(tmp_path / "step-1")
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 2}, tmp_path / "latest")
    assert (tmp_path / "latest").is_symlink() and checkpoint_step(tmp_path / "step-1") == 2


# -- full disk, integrity ---------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs: real ENOSPC from the kernel."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)]).returncode:
        pytest.skip("needs root to mount a tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_names_the_file_says_no_space_and_keeps_the_previous_file(tiny_disk):
    path = tiny_disk / "ckpt.pt"
    ad.save({"version": 1, "w": torch.zeros(100)}, path)
    with pytest.raises(CheckpointError) as info:
        ad.save({"version": 2, "w": torch.randn(1_000_000)}, path)
    message = str(info.value)
    assert message.splitlines()[0].startswith(f"Cannot save {path}: no space left on the device (")
    assert "unexpected pos" not in message
    assert ad.load(path)["version"] == 1 and temps(tiny_disk) == []


def test_a_full_disk_during_a_directory_checkpoint_says_no_space_and_keeps_the_previous_one(tiny_disk):
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, tiny_disk / "c")
    with pytest.raises(CheckpointError) as info:
        ad.checkpoint.save({"model": torch.nn.Linear(1000, 1000), "step": 2}, tiny_disk / "c")
    assert str(info.value) == f"Saving checkpoint {tiny_disk / 'c'} failed: no space left on the device"
    assert checkpoint_step(tiny_disk / "c") == 1 and temps(tiny_disk) == []


def test_a_bit_flip_in_the_data_is_caught_by_the_crc_check(tmp_path):
    path = tmp_path / "ckpt.pt"
    ad.save({"w": torch.zeros(10_000)}, path)
    data = bytearray(path.read_bytes())
    at = data.index(bytes(4096))  # inside the zeros of the tensor's record
    data[at + 100] ^= 0x10
    path.write_bytes(bytes(data))
    assert torch.count_nonzero(torch.load(path)["w"]) == 1  # torch.load alone gives a wrong value silently
    with pytest.raises(CheckpointError) as info:
        ad.load(path)
    assert str(info.value).splitlines()[0] == (
        f"Checkpoint {path} is corrupt or truncated (corrupt: member archive/data/0 fails its CRC-32 check)."
    )


def test_a_truncated_file_is_reported_as_truncated(tmp_path):
    path = tmp_path / "ckpt.pt"
    ad.save({"w": torch.randn(1000)}, path)
    path.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(CheckpointError, match=r"\(truncated: the end of the archive is missing\)"):
        ad.load(path)


# -- one atomic publish, crashes, concurrency ---------------------------------------------------------------


def test_the_two_rename_fallback_recovers_a_crash_between_its_renames(tmp_path, monkeypatch):
    monkeypatch.setattr(publish, "_libc_renameat2", False)  # as where renameat2 is missing
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, tmp_path / "c")
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 2}, tmp_path / "c")
    assert checkpoint_step(tmp_path / "c") == 2 and temps(tmp_path) == []
    token = "0123456789abcdef"  # a writer killed after moving the old checkpoint aside, before moving its own in
    (tmp_path / "c").rename(tmp_path / publish.temp_name("c", token, "old"))
    (tmp_path / publish.temp_name("c", token)).mkdir()
    (tmp_path / publish.temp_name("c", token) / publish.MARKER).write_bytes(b"anydevice checkpoint")
    with open_place(tmp_path / "c") as place:
        publish.remove_stale_temps(place)
    assert checkpoint_step(tmp_path / "c") == 2 and temps(tmp_path) == []


def test_a_checkpoint_moved_or_emptied_by_a_concurrent_save_while_it_is_checked_is_not_refused(tmp_path, monkeypatch):
    """Three savers of one path failed now and then with "No such file or directory (c)" or "(__0_0.distcp)": the check
    that the target is an earlier checkpoint read it while another save moved it aside or deleted its files."""
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, tmp_path / "c")
    with open_place(tmp_path / "c") as place:
        seen = place.lstat()
        (tmp_path / "c").rename(tmp_path / "elsewhere")  # another save moved it after this one's lstat
        monkeypatch.setattr(place, "lstat", lambda name=None: seen)
        assert publish.directory_problem(place) is None
    (tmp_path / "elsewhere").rename(tmp_path / "c")
    fd = os.open(tmp_path / "c", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert publish._checkpoint_entry(fd, "__0_0.distcp")  # listed, then deleted by the save that replaced it
        assert not publish._checkpoint_entry(fd, "notes.txt")  # a name no checkpoint holds is still foreign
    finally:
        os.close(fd)
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"it holds notes\.txt, which a checkpoint does not"):
        ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 2}, tmp_path / "c")


CHECKPOINT_SAVER = """
import sys, torch, anydevice as ad
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
first = int(sys.argv[2])
for step in range(first, first + int(sys.argv[3])):
    ad.checkpoint.save({"model": model, "step": step}, sys.argv[1])
    if step == first:
        print("ready", flush=True)  # DCP imported and warm: from here on the loop only saves
"""


DIRECTORY_SAVE_LOOP = """
def save_loop(path, first, count):
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
    for step in range(int(first), int(first) + int(count)):
        ad.checkpoint.save({"model": model, "step": step}, path)
        if step == int(first):
            ready()  # the first save done: from here on the loop only saves
"""


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "two-rename-fallback"])
def test_concurrent_directory_savers_to_one_path_end_clean(tmp_path, renameat2):
    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    script = (
        CHECKPOINT_SAVER if renameat2 else "import anydevice.files.publish as p\np._libc_renameat2 = False\n" + CHECKPOINT_SAVER
    )
    savers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "c"), start, "8"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for start in ("100", "200")
    ]
    errors = [p.communicate(timeout=300)[1] for p in savers]
    assert [p.returncode for p in savers] == [0, 0], errors
    assert checkpoint_step(tmp_path / "c") in (107, 207)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no hidden temporaries, full-size or not


@pytest.mark.slow
@pytest.mark.long("ten savers killed mid-save, each forked from one interpreter")
def test_ten_sigkills_during_directory_saves_never_lose_the_previous_checkpoint(tmp_path):
    path = tmp_path / "c"
    ad.checkpoint.save({"model": torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]), "step": 0}, path)
    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    rng, step, left_behind = random.Random(18), 0, []
    savers = ForkServer(DIRECTORY_SAVE_LOOP, env)
    for kill in range(10):
        saver = savers.start(path, 1000 * (kill + 1), 100000)
        time.sleep(rng.uniform(0.0, 0.5))
        assert savers.kill(saver) == -signal.SIGKILL
        model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
        now = ad.checkpoint.load({"model": model, "step": -1}, path)["step"]  # whole: the previous or a newer one
        assert now >= step
        step = now
        left_behind.append(len(temps(tmp_path)))
        ad.checkpoint.save({"model": model, "step": step}, path)  # the next save cleans up
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    savers.close()
    assert sum(left_behind) >= 1, "no kill landed mid-save: the loop tested nothing"


def test_loading_a_fifo_is_an_error_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match=r"ckpt\.pt is a FIFO \(named pipe\), not a regular file; it was not read"):
        ad.load(tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match=r"ckpt\.pt: it is a FIFO \(named pipe\), not a regular file; nothing was written"):
        ad.save({"x": 1}, tmp_path / "ckpt.pt")


def test_an_object_that_cannot_be_saved_names_the_file_and_leaves_no_temporary(tmp_path):
    with pytest.raises(CheckpointError, match=rf"^Cannot save {tmp_path / 'ckpt.pt'}: (AttributeError|PicklingError)"):
        ad.save({"f": lambda: 1}, tmp_path / "ckpt.pt")
    assert list(tmp_path.iterdir()) == []


def test_loading_with_the_wrong_function_says_which_one_to_use(tmp_path):
    ad.save({"x": 1}, tmp_path / "w.pt")
    ad.checkpoint.save({"step": 1}, tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"c is a directory; ad.load reads one file .*\nFor a directory checkpoint"):
        ad.load(tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"w\.pt is a file, not a checkpoint directory"):
        ad.checkpoint.load({"x": 0}, tmp_path / "w.pt")
