"""ad.checkpoint and ad.save on xla (torch 2.9, PJRT CPU): a main-lane FSDP2 checkpoint loads here; xla saves load on cpu.

tests/xla/fixtures/fsdp-2rank was saved by 2 FSDP2 ranks with the main lane's torch 2.13
(scripts/make_checkpoint_fixture.py, which also wrote the digests in expected.json).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import anydevice as ad
from tests.utils import REPO, python

pytestmark = pytest.mark.xla

torch = pytest.importorskip("torch")
pytest.importorskip("torch_xla")

FIXTURE = Path(__file__).parent / "fixtures" / "fsdp-2rank"
WORKER = REPO / "tests" / "distributed" / "workers" / "dcp_checkpoint.py"


@pytest.fixture(autouse=True)
def on_xla(clean_anydevice: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    ad.use("xla")
    yield


@pytest.mark.slow
def test_a_checkpoint_saved_by_2_fsdp_ranks_in_the_main_lane_loads_on_xla():
    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert expected["saved_by"]["world_size"] == 2 and expected["saved_by"]["torch"].startswith("2.13")
    run = python(str(WORKER), "load", str(FIXTURE / "checkpoint"), "none", env={"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU"})
    assert run.returncode == 0, run.stderr
    row = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("{")))
    assert (row["step"], row["note"]) == (3, "three steps")
    assert row["digest"] == expected["digest"]  # every parameter, resharded from 2 shards, on the xla device
    assert row["digest_after_step"] == pytest.approx(expected["digest_after_step"], rel=1e-6)  # the optimizer state too


def test_saved_on_xla_loads_on_cpu_sync_and_async(tmp_path):
    torch.manual_seed(0)
    model = ad.to(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(ad.to(torch.randn(3, 4))).sum().backward()
    opt.step()
    ad.step()
    ad.checkpoint.save({"model": model, "optim": opt, "step": 1}, tmp_path / "sync")
    future = ad.checkpoint.save({"model": model, "optim": opt, "step": 2}, tmp_path / "async", async_save=True)
    assert future is not None and future.result(timeout=120) == tmp_path / "async"
    for name, step in (("sync", 1), ("async", 2)):
        cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=0.1)
        state = ad.checkpoint.load({"model": cpu_model, "optim": cpu_opt, "step": 0}, tmp_path / name)
        assert state["step"] == step
        assert all(torch.equal(c, x.cpu()) for c, x in zip(cpu_model.parameters(), model.parameters(), strict=True))
        assert torch.equal(cpu_opt.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"].cpu())


def test_ad_save_on_xla_writes_a_file_cpu_loads(tmp_path):
    ad.save({"w": ad.to(torch.arange(4.0))}, tmp_path / "w.pt")
    assert torch.equal(ad.load(tmp_path / "w.pt")["w"], torch.arange(4.0))
