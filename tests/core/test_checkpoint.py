"""ad.checkpoint in one process (no process group): round trips, pairing, atomicity, async, clear errors.

The multi-rank cases (FSDP2 saved by 2 ranks, loaded by 1; a killed FSDP run resumed) are in
tests/distributed/test_distributed_checkpoint.py; the XLA lane's in tests/xla/test_checkpoint_xla.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

import anydevice as ad
from anydevice.errors import CheckpointError
from tests.utils import child_env

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


@pytest.fixture(autouse=True)
def cpu() -> None:
    ad.use("cpu")


def trained(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(123)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def same_state(a: tuple[nn.Module, torch.optim.Optimizer], b: tuple[nn.Module, torch.optim.Optimizer]) -> bool:
    params = all(torch.equal(x, y) for x, y in zip(a[0].parameters(), b[0].parameters(), strict=True))
    sa, sb = a[1].state_dict()["state"], b[1].state_dict()["state"]
    moments = all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in ("exp_avg", "exp_avg_sq", "step"))
    return params and moments and sa.keys() == sb.keys()


def test_round_trip_fills_modules_and_optimizers_in_place_and_returns_plain_values(tmp_path):
    saved = trained()
    ad.checkpoint.save(
        {"model": saved[0], "optim": saved[1], "step": 7, "tag": "run-a", "ema": torch.arange(3.0)}, tmp_path / "c"
    )
    assert ad.checkpoint.is_complete(tmp_path / "c")
    loaded = fresh()
    state = ad.checkpoint.load(
        {"model": loaded[0], "optim": loaded[1], "step": 0, "tag": "", "ema": torch.zeros(3)}, tmp_path / "c"
    )
    assert same_state(saved, loaded)
    assert state["model"] is loaded[0] and state["optim"] is loaded[1]
    assert state["step"] == 7 and state["tag"] == "run-a" and torch.equal(state["ema"], torch.arange(3.0))


def test_saving_over_an_existing_checkpoint_replaces_it(tmp_path):
    ad.checkpoint.save({"model": trained(0)[0], "step": 1}, tmp_path / "c")
    newer = trained(1)
    ad.checkpoint.save({"model": newer[0], "step": 2}, tmp_path / "c")
    model, _ = fresh()
    assert ad.checkpoint.load({"model": model, "step": 0}, tmp_path / "c")["step"] == 2
    assert all(torch.equal(x, y) for x, y in zip(model.parameters(), newer[0].parameters(), strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_async_save_returns_a_future_of_the_finished_checkpoint(tmp_path):
    saved = trained()
    future = ad.checkpoint.save({"model": saved[0], "optim": saved[1], "step": 3}, tmp_path / "c", async_save=True)
    assert future is not None and future.result(timeout=120) == tmp_path / "c"
    loaded = fresh()
    assert ad.checkpoint.load({"model": loaded[0], "optim": loaded[1], "step": 0}, tmp_path / "c")["step"] == 3
    assert same_state(saved, loaded)


def test_an_optimizer_is_paired_with_the_module_whose_parameters_it_updates(tmp_path):
    (enc, enc_opt), (dec, dec_opt) = trained(0), trained(1)
    ad.checkpoint.save({"decoder": dec, "encoder": enc, "enc_opt": enc_opt, "dec_opt": dec_opt}, tmp_path / "c")
    (enc2, enc_opt2), (dec2, dec_opt2) = fresh(), fresh()
    ad.checkpoint.load({"decoder": dec2, "encoder": enc2, "enc_opt": enc_opt2, "dec_opt": dec_opt2}, tmp_path / "c")
    assert same_state((enc, enc_opt), (enc2, enc_opt2)) and same_state((dec, dec_opt), (dec2, dec_opt2))


def test_an_optimizer_without_its_model_is_an_error_naming_it(tmp_path):
    _, opt = trained()
    with pytest.raises(CheckpointError, match="Optimizer 'optim' updates parameters of no single module"):
        ad.checkpoint.save({"optim": opt, "step": 1}, tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_loading_a_missing_key_names_it(tmp_path):
    ad.checkpoint.save({"model": trained()[0]}, tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"Checkpoint .*c could not be loaded: .*step"):
        ad.checkpoint.load({"model": fresh()[0], "step": 0}, tmp_path / "c")


def test_a_directory_without_metadata_is_not_a_checkpoint(tmp_path):
    ad.checkpoint.save({"model": trained()[0]}, tmp_path / "c")
    (tmp_path / "c" / ".metadata").unlink()  # what a save killed before DCP finished would look like
    assert not ad.checkpoint.is_complete(tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"is not a complete checkpoint \(it has no \.metadata\)"):
        ad.checkpoint.load({"model": fresh()[0]}, tmp_path / "c")
    with pytest.raises(CheckpointError, match="No checkpoint at"):
        ad.checkpoint.load({"model": fresh()[0]}, tmp_path / "nothing")


def test_a_corrupt_shard_is_an_error_naming_the_checkpoint(tmp_path):
    ad.checkpoint.save({"model": trained()[0]}, tmp_path / "c")
    shard = next((tmp_path / "c").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:10])
    with pytest.raises(CheckpointError, match=f"Checkpoint {tmp_path / 'c'} could not be loaded"):
        ad.checkpoint.load({"model": fresh()[0]}, tmp_path / "c")


SAVER = """
import sys, torch, anydevice as ad
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(16)])
print("ready", flush=True)
for step in range(1, 1000):
    ad.checkpoint.save({"model": model, "step": step}, sys.argv[1])
"""


@pytest.mark.slow
def test_a_killed_save_never_leaves_a_checkpoint_that_looks_complete(tmp_path):
    ad.checkpoint.save({"model": nn.Sequential(*[nn.Linear(512, 512) for _ in range(16)]), "step": 0}, tmp_path / "c")
    env = child_env({"ANYDEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    for delay in (0.3, 0.9, 1.7):
        saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path / "c")], env=env, stdout=subprocess.PIPE, text=True)
        assert saver.stdout is not None and saver.stdout.readline() == "ready\n"
        time.sleep(delay)
        os.kill(saver.pid, signal.SIGKILL)
        saver.wait(timeout=60)
        saver.stdout.close()
        model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(16)])
        assert ad.checkpoint.load({"model": model, "step": -1}, tmp_path / "c")["step"] >= 0  # whole, old or new
        ad.checkpoint.save({"model": model, "step": 0}, tmp_path / "c")  # the next save clears what the kill left
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
