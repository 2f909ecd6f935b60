"""Issue 46: ``ad.save`` replaces only a torch checkpoint (torch's archive layout, not the zip magic), and ``ad.load`` of
anything else is a ``CheckpointError`` naming what the file looks like.

Each file is made the way its own tool makes it (numpy, zipfile as Word and Java write theirs, torch.jit.save).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import anydevice as ad
from anydevice.errors import CheckpointError


@pytest.fixture(autouse=True)
def cpu() -> None:
    ad.use("cpu")


def _zip(path: Path, members: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)


def _npz(path: Path) -> None:
    with open(path, "wb") as handle:  # np.savez adds .npz to a str path without it
        np.savez(handle, weights=np.ones(3), bias=np.zeros(2))


WORD = {"[Content_Types].xml": "<T/>", "word/document.xml": "<w/>"}
JAR = {"META-INF/MANIFEST.MF": "Manifest-Version: 1.0\n", "A.class": "x"}
MIMIC = {"a/data.pkl": "x", "a/version": "3", "a/notes.txt": "mine"}  # torch's records and a file of the user's


def _torchscript(path: Path) -> None:
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(path))


FOREIGN: dict[str, tuple[Callable[[Path], None], str]] = {
    "weights.npz": (_npz, "a NumPy .npz archive"),
    "report.docx": (lambda p: _zip(p, WORD), "a zip archive (Word document)"),
    "tool.jar": (lambda p: _zip(p, JAR), "a zip archive (Java archive)"),
    "data.zip": (lambda p: _zip(p, {"readme.txt": "hello"}), "a zip archive"),
    "mimic.pt": (lambda p: _zip(p, MIMIC), "a zip archive"),
    "notes.txt": (lambda p: p.write_text("step 100: loss 0.31\n"), "a text file"),
    "model.pt": (_torchscript, "a TorchScript model (torch.jit.save)"),
    "array.npy": (lambda p: np.save(p, np.ones(3)), "a NumPy .npy array"),
}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_ad_save_refuses_every_file_that_is_not_a_torch_checkpoint_and_leaves_it_byte_identical(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    make, looks_like = FOREIGN[name]
    make(path)
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as info:
        ad.save({"step": 1, "w": torch.ones(2)}, path)
    assert str(info.value).splitlines()[0] == (
        f"Cannot save {path}: the file there looks like {looks_like}, not a checkpoint; it was left as it was."
    )
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == [name]


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_ad_load_of_a_file_that_is_not_a_checkpoint_names_what_it_looks_like(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    make, looks_like = FOREIGN[name]
    make(path)
    with pytest.raises(CheckpointError) as info:
        ad.load(path)
    assert str(info.value).splitlines()[0] == f"{path} is not a checkpoint: it looks like {looks_like}."
    assert "inline_container" not in str(info.value)


def _torch_to_buffer(path: Path) -> None:
    buffer = io.BytesIO()  # torch names its archive's folder "archive" when it writes to a file object
    torch.save({"step": 0}, buffer)
    path.write_bytes(buffer.getvalue())


EARLIER: dict[str, Callable[[Path], None]] = {
    "ad.save": lambda p: ad.save({"step": 0, "w": torch.zeros(3)}, p),
    "torch.save to a path": lambda p: torch.save({"step": 0, "w": torch.zeros(3)}, p),
    "torch.save to a buffer": _torch_to_buffer,
    "torch.save legacy format": lambda p: torch.save({"step": 0}, p, _use_new_zipfile_serialization=False),
    "an empty file": lambda p: p.write_bytes(b""),
    "an ad.save cut short": lambda p: (ad.save({"w": torch.zeros(10_000)}, p), os.truncate(p, 20_000)),
}


@pytest.mark.parametrize("earlier", sorted(EARLIER))
def test_an_earlier_torch_checkpoint_is_replaced(tmp_path: Path, earlier: str) -> None:
    path = tmp_path / "step.pt"
    EARLIER[earlier](path)
    ad.save({"step": 1, "w": torch.ones(3)}, path)
    loaded = ad.load(path)
    assert loaded["step"] == 1 and torch.equal(loaded["w"], torch.ones(3))


def test_a_link_to_a_device_is_refused_by_save_and_load_naming_the_link(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    path.symlink_to("/dev/zero")
    with pytest.raises(CheckpointError) as info:
        ad.save({"step": 1}, path)
    assert str(info.value).splitlines()[0] == (
        f"Cannot save {path}: it is a symbolic link to /dev/zero, a character device, not a regular file; "
        "nothing was written through it."
    )
    with pytest.raises(CheckpointError) as info:
        ad.load(path)
    assert str(info.value).splitlines()[0] == (
        f"Checkpoint {path} is a symbolic link to /dev/zero, a character device, not a regular file; it was not read."
    )
    assert os.readlink(path) == "/dev/zero" and sorted(os.listdir(tmp_path)) == ["ckpt.pt"]
