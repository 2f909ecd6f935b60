"""Issue 25, reading: result files and the detection cache are read only when they are regular files of a bounded
size (and, where others can write, ours); a FIFO never hangs a command, and a bad cache entry is redone, not blamed."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path

from anydevice.compat_matrix.schema import dump_run
from tests.compat_matrix.builders import result, run
from tests.hostile.other_user import OTHER, as_other, needs_root
from tests.utils import REPO, anydevice_cli, child_env

MEMORY = 4 << 30  # a reader that slurps /dev/zero hits this, not the machine


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _render(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``anydevice matrix render`` in a child with bounded memory and time (a hang fails the test, never stalls it)."""
    return subprocess.run(
        [sys.executable, "-m", "anydevice", "matrix", "render", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
        cwd=REPO,
        preexec_fn=_limited,
    )


def _good(directory: Path) -> Path:
    path = directory / "good.json"
    dump_run(run([result("sanity", shim="sanity"), result("matmul")]), path)
    return path


def test_a_fifo_a_link_to_dev_zero_and_a_huge_file_are_named_and_skipped(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _good(results)
    os.mkfifo(results / "fifo.json")
    (results / "zero.json").symlink_to("/dev/zero")
    with open(results / "huge.json", "wb") as huge:  # sparse: 100 MiB on paper, nothing on disk
        huge.truncate(100 << 20)
    proc = _render(str(results), "--out", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    assert "error: fifo.json: cannot read: it is a FIFO (named pipe), not a regular file" in proc.stderr
    assert "error: zero.json: cannot read: it is a character device, not a regular file" in proc.stderr
    assert f"error: huge.json: cannot read: it is {100 << 20} bytes, more than the" in proc.stderr
    assert "from 1 run(s); skipped 3 file(s)" in proc.stdout


@needs_root
def test_another_users_result_file_in_a_shared_directory_is_refused(tmp_path: Path, shared: Path) -> None:
    theirs = _good(shared)
    os.chown(theirs, OTHER, OTHER)
    ours = _good(tmp_path)
    proc = _render(str(theirs), str(ours), "--out", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    refused = f"error: {theirs.name}: cannot read: it belongs to another user (uid {OTHER}) in a directory other users can"
    assert refused in proc.stderr
    assert "from 1 run(s)" in proc.stdout


# -- the detection cache ------------------------------------------------------------------------------------


def _list(site: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return anydevice_cli("list", "--json", env={"ANYDEVICE_DETECT_TIMEOUT": "30", **env}, pythonpath=site, timeout=timeout)


def _entry(cache: Path) -> Path:
    [entry] = (cache / "plugins").glob("vet-*.json")
    return entry


def _chatty(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    return next(d for d in json.loads(proc.stdout)["devices"] if d["name"] == "chatty")


def _runs(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def test_a_fifo_in_the_caches_place_does_not_hang_and_is_replaced(noisy_site: Path, tmp_path: Path) -> None:
    log = tmp_path / "detections"
    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path / "cache"), "CHATTY_DETECTIONS": str(log)}
    _chatty(_list(noisy_site, env))
    entry = _entry(tmp_path / "cache")
    entry.unlink()
    os.mkfifo(entry)
    assert _chatty(_list(noisy_site, env, timeout=60))["reason"] == "chatty has no chip"
    assert _runs(log) == 2 and stat.S_ISREG(entry.lstat().st_mode)  # detected again, and the entry is a file again


def test_a_cache_entry_with_wrong_types_is_redone_not_blamed_on_the_plugin(noisy_site: Path, tmp_path: Path) -> None:
    log = tmp_path / "detections"
    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path / "cache"), "CHATTY_DETECTIONS": str(log)}
    first = _chatty(_list(noisy_site, env))
    entry = _entry(tmp_path / "cache")
    data = json.loads(entry.read_text())
    data["plugins"]["chatty"]["detections"]["chatty"].update(available="yes", count="many")
    entry.write_text(json.dumps(data))
    again = _list(noisy_site, env)
    assert _chatty(again) == first  # not "plugin 'chatty' returned an invalid detection"
    assert "invalid" not in again.stdout and _runs(log) == 2
    assert json.loads(entry.read_text())["plugins"]["chatty"]["detections"]["chatty"]["available"] is False  # redone


@needs_root
def test_another_users_entry_in_a_shared_cache_dir_is_not_believed(noisy_site: Path, tmp_path: Path, shared: Path) -> None:
    log = tmp_path / "detections"
    env = {"ANYDEVICE_CACHE_DIR": str(shared), "CHATTY_DETECTIONS": str(log)}
    _chatty(_list(noisy_site, env))
    (shared / "plugins").chmod(0o1777)  # a cache directory every user shares
    entry = _entry(shared)
    forged = json.loads(entry.read_text())
    forged["plugins"]["chatty"]["detections"]["chatty"].update(available=True, reason="FORGED: a chip is here", count=8)
    entry.unlink()
    as_other("sh", "-c", f": > {entry}")  # the other user makes the entry, at the name our key gives ...
    entry.write_text(json.dumps(forged))  # ... with the contents they chose (it stays theirs)
    assert entry.stat().st_uid == OTHER
    device = _chatty(_list(noisy_site, env))
    assert device["available"] is False and device["reason"] == "chatty has no chip"
    assert _runs(log) == 2  # detected again instead


PLUGIN = """
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl

REASON = "edited-plugin answer A"


def never_loaded():
    raise AssertionError("never selected")


@hookimpl
def anydevice_register_devices(register):
    register(DeviceSpec(name="edited", detect=lambda: Detection.missing(REASON, None, "no_hardware"), load=never_loaded))
"""


def test_a_plugin_edited_in_place_at_the_same_version_is_detected_again(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "anydevice_edited-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: anydevice-edited\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[anydevice]\nedited = anydevice_edited\n")
    module = site / "anydevice_edited.py"
    module.write_text(PLUGIN)
    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path / "cache")}

    def reason() -> str:
        proc = _list(site, env)
        assert proc.returncode == 0, proc.stderr
        return str(next(d for d in json.loads(proc.stdout)["devices"] if d["name"] == "edited")["reason"])

    assert reason() == "edited-plugin answer A"
    module.write_text(PLUGIN.replace("answer A", "answer B"))  # same size, same version
    later = time.time() + 5
    os.utime(module, (later, later))
    assert reason() == "edited-plugin answer B"
