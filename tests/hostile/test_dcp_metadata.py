"""Issue 25, sharded checkpoints: ad.checkpoint.load runs no code from a crafted checkpoint (torch's own DCP load does).

A crafted ``.metadata`` (DCP's metadata is a pickle) and a crafted non-tensor value (DCP reads those
with ``weights_only=False``) each try to create a marker file when unpickled; the load is refused with
the class named and the marker never appears. Real checkpoints, written by ad.checkpoint.save and by
torch's own dcp.save, keep loading.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

import anydevice as ad
from anydevice.checkpoint import METADATA
from anydevice.checkpoint.dcp_reading import allowed_classes
from anydevice.errors import CheckpointError

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


class Planted:
    """Unpickling it touches ``marker``: the proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (open, (str(self.marker), "w"))


@pytest.fixture(autouse=True)
def cpu() -> None:
    ad.use("cpu")


def saved(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    model = torch.nn.Linear(3, 2)
    directory = tmp_path / "ckpt"
    ad.checkpoint.save({"model": model, "step": 7}, directory)
    return directory, model


def test_a_metadata_that_runs_code_is_refused_naming_the_class(tmp_path):
    directory, _ = saved(tmp_path)
    marker = tmp_path / "ran"
    (directory / METADATA).write_bytes(pickle.dumps(Planted(marker)))
    with pytest.raises(CheckpointError, match=r"\.metadata was refused: it names io\.open, which is not one of DCP's"):
        ad.checkpoint.load({"model": torch.nn.Linear(3, 2), "step": 0}, directory)
    assert not marker.exists()


def test_a_metadata_hiding_code_inside_real_metadata_is_refused(tmp_path):
    directory, _ = saved(tmp_path)
    marker = tmp_path / "ran"
    with open(directory / METADATA, "rb") as handle:
        real = pickle.load(handle)  # the file this test just wrote
    real.planner_data = {"step": Planted(marker)}
    (directory / METADATA).write_bytes(pickle.dumps(real))
    with pytest.raises(CheckpointError, match=r"it names io\.open"):
        ad.checkpoint.load({"step": 0}, directory)
    assert not marker.exists()


def test_a_plain_value_that_runs_code_is_refused_naming_the_global(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    directory = tmp_path / "ckpt"
    dcp.save({"step": Planted(marker)}, checkpoint_id=directory, no_dist=True)  # torch pickles it without complaint
    marker.unlink(missing_ok=True)
    with pytest.raises(CheckpointError, match=r"^Checkpoint value 'step' was refused: it needs io\.open"):
        ad.checkpoint.load({"step": 0}, directory)
    assert not marker.exists()


def test_garbage_metadata_is_corrupt_not_a_traceback(tmp_path):
    directory, _ = saved(tmp_path)
    (directory / METADATA).write_bytes(b"\x80\x04not a pickle")
    with pytest.raises(CheckpointError, match=r"\.metadata is corrupt or truncated"):
        ad.checkpoint.load({"step": 0}, directory)


def test_real_checkpoints_still_load(tmp_path):
    directory, model = saved(tmp_path)
    fresh = torch.nn.Linear(3, 2)
    state = ad.checkpoint.load({"model": fresh, "step": 0}, directory)
    assert state["step"] == 7
    assert torch.equal(fresh.weight, model.weight)
    plain = tmp_path / "plain"  # written by torch's own DCP, with every kind of plain value
    values = {"i": 3, "f": 0.5, "s": "x", "l": [1, {"a": None}], "t": torch.ones(2, dtype=torch.bfloat16)}
    dcp.save(dict(values), checkpoint_id=plain, no_dist=True)
    template = {"i": 0, "f": 0.0, "s": "", "l": [0, {"a": 1}], "t": torch.zeros(2, dtype=torch.bfloat16)}
    loaded = ad.checkpoint.load(template, plain)
    assert loaded["i"] == 3 and loaded["f"] == 0.5 and loaded["s"] == "x"
    assert loaded["l"] == [1, {"a": None}] and torch.equal(loaded["t"], values["t"])


def test_the_allow_list_comes_from_the_running_torch():
    from torch.distributed.checkpoint import metadata

    names = {name for module, name in allowed_classes() if module == metadata.__name__}
    assert {"Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "MetadataIndex"} <= names
    assert ("builtins", "eval") not in allowed_classes() and ("os", "system") not in allowed_classes()
