"""Issue 25's remaining minor classes, each with the exact outcome: what a user sees instead of a raw escape
sequence, a traceback or a silent load."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import CheckpointError
from tests.distributed.helpers import anydevice_run
from tests.hostile import test_checkpoints
from tests.utils import anydevice_cli


@pytest.mark.parametrize(
    ("value", "first_line"),
    [
        ("tp\x1b]0;owned\x07u", r"Malformed device name 'tp\x1b]0;owned\x07u' in 'tp\x1b]0;owned\x07u'."),
        ("cpu,\x1b[31mx", r"Malformed device name '\x1b[31mx' in 'cpu,\x1b[31mx'."),
        ("cpu,,\x1b[2J", r"Malformed device list 'cpu,,\x1b[2J': it has an empty entry."),
        ("cpu:\x1b[1", r"Bad device index '\x1b[1' in 'cpu:\x1b[1': the index must be a non-negative integer"),
    ],
)
def test_anydevice_with_control_characters_is_echoed_escaped(value: str, first_line: str) -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE": value})
    assert proc.returncode != 0
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert proc.stderr.startswith(f"anydevice: error: {first_line}")


@pytest.mark.parametrize("value", ["~nosuchuser-anydevice/cache", "~nosuchuser-anydevice"])
def test_doctor_with_an_unknown_user_in_a_path_setting_is_one_clear_error(value: str) -> None:
    proc = anydevice_cli("doctor", env={"ANYDEVICE": "cpu", "ANYDEVICE_CACHE_DIR": value})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == (
        f"anydevice: error: ANYDEVICE_CACHE_DIR={value!r} starts with ~nosuchuser-anydevice, but there is no user "
        "'nosuchuser-anydevice'."
    )


def test_a_checkpoint_with_keys_the_module_lacks_is_refused_unless_strict_is_off(tmp_path) -> None:
    ad.use("cpu")
    saved = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    ad.checkpoint.save({"model": saved, "step": 4}, tmp_path / "c")
    smaller = torch.nn.Sequential(torch.nn.Linear(3, 3))
    before = smaller[0].weight.detach().clone()
    with pytest.raises(CheckpointError) as info:
        ad.checkpoint.load({"model": smaller, "step": 0}, tmp_path / "c")
    assert str(info.value).splitlines()[0] == (
        f"Checkpoint {tmp_path / 'c'} holds entries for 'model' that the module does not have "
        "(unexpected keys: 1.bias, 1.weight)."
    )
    assert torch.equal(smaller[0].weight, before)  # nothing was loaded
    state = ad.checkpoint.load({"model": smaller, "step": 0}, tmp_path / "c", strict=False)
    assert state["step"] == 4 and torch.equal(smaller[0].weight, saved[0].weight)
    torch.nn.Sequential(torch.nn.Linear(3, 3)).load_state_dict(saved.state_dict(), strict=False)  # torch's rule, same keys
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "1.weight", "1.bias"'):
        torch.nn.Sequential(torch.nn.Linear(3, 3)).load_state_dict(saved.state_dict())


@pytest.mark.parametrize("value", ["not a module!", ":attribute", "pkg:"])
def test_a_malformed_entry_point_is_named_with_what_is_wrong(value: str, tmp_path) -> None:
    info = tmp_path / "site" / "anydevice_badentry-1.0.dist-info"  # an installed distribution, as pip leaves it
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: anydevice-badentry\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[anydevice]\nbadentry = {value}\n")
    proc = anydevice_cli("list", env={"ANYDEVICE_CACHE_DIR": str(tmp_path / "cache")}, pythonpath=tmp_path / "site")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("badentry"))
    assert "NoneType" not in proc.stdout
    assert line.split(None, 3)[3] == (
        f"plugin failed at import: ValueError: malformed entry point badentry = {value!r} in group 'anydevice': "
        "the value must be 'module' or 'module:attribute' (dotted Python names)"
    )


def deflated_copy(source: Path, target: Path, extra_zeros: int = 0) -> None:
    """``source`` (a torch.save archive) rewritten with every member deflated, plus a member of ``extra_zeros`` zero bytes."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        prefix = src.namelist()[0].split("/")[0]
        for name in src.namelist():
            dst.writestr(name, src.read(name))
        if extra_zeros:
            padding = zipfile.ZipInfo(f"{prefix}/.data/padding")  # a hidden record: torch.save's layout still
            padding.compress_type = zipfile.ZIP_DEFLATED
            with dst.open(padding, "w", force_zip64=True) as member:
                block = bytes(1 << 20)
                for _ in range(extra_zeros >> 20):
                    member.write(block)


def test_the_crc_check_refuses_a_small_file_claiming_a_huge_compressed_member(tmp_path: Path) -> None:
    ad.use("cpu")
    plain = tmp_path / "plain.pt"
    ad.save({"w": torch.arange(10.0)}, plain)
    deflated = tmp_path / "deflated.pt"  # another tool's archive: torch.load reads compressed members too
    deflated_copy(plain, deflated)
    assert torch.equal(ad.load(deflated)["w"], torch.arange(10.0))
    bomb = tmp_path / "bomb.pt"
    deflated_copy(plain, bomb, extra_zeros=1 << 30)
    assert bomb.stat().st_size < 2 << 20 and torch.equal(torch.load(bomb)["w"], torch.arange(10.0))
    with pytest.raises(CheckpointError) as info:
        ad.load(bomb)
    with zipfile.ZipFile(bomb) as archive:
        padding = next(member for member in archive.infolist() if member.filename.endswith("/padding"))
    assert str(info.value).splitlines()[0] == (
        f"Checkpoint {bomb} was refused: its compressed member {padding.filename} would inflate to {1 << 30} bytes "
        f"from {padding.compress_size} ({bomb.stat().st_size} bytes in the whole file)."
    )


tiny_disk = test_checkpoints.tiny_disk  # the fixture: a 256 KiB tmpfs (needs root)

FULL_DISK_SAVE = """
import sys, torch, torch.distributed as dist, anydevice as ad
dist.init_process_group("gloo")
try:
    ad.checkpoint.save({"model": torch.nn.Linear(1000, 1000), "step": 2}, sys.argv[1])
except Exception as exc:
    print(f"rank {dist.get_rank()}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
"""


def test_a_full_disk_under_two_ranks_says_no_space_not_torchs_enforce_fail(tiny_disk: Path, tmp_path: Path) -> None:
    script = tmp_path / "save.py"
    script.write_text(FULL_DISK_SAVE)
    result = anydevice_run("-n", "2", script, tiny_disk / "c", timeout=300)
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    assert len(lines) == 2, result.stdout + result.stderr
    said = f"rank 0: CheckpointError: Saving checkpoint {tiny_disk / 'c'} failed: no space left on the device"
    assert lines[0] in (said, f"{said} (rank 0)"), lines[0]  # torch 2.15's DCP adds the rank
    assert all(f"Saving checkpoint {tiny_disk / 'c'} failed: " in line for line in lines)
    assert "enforce fail" not in lines[0] and not (tiny_disk / "c").exists()
