"""Ray pipelines with a device per stage: each stage's workers start with their own ANYDEVICE and resource request."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.utils import REPO, pip_site, run

WORKERS = Path(__file__).parent / "workers"


def test_a_stage_asks_for_its_device_and_carries_its_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    from anydevice.integrations.ray import stage

    monkeypatch.setenv("ANYDEVICE", "cpu")  # the driver's own selection does not leak into a stage
    assert stage("cuda") == {
        "runtime_env": {"env_vars": {"ANYDEVICE": "cuda", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}},
        "num_gpus": 1,
    }
    assert stage("tpu", per_worker=4)["resources"] == {"TPU": 4}
    assert stage("cpu") == {"runtime_env": {"env_vars": {"ANYDEVICE": "cpu", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}}}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_three_stages_on_a_local_cluster_each_select_their_device(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    site = pip_site("toy", [REPO / "tests" / "plugins" / "anydevice_toydevice"], tmp_path_factory)
    out = tmp_path / "out"
    out.mkdir()
    env = {"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"}  # Ray's workers at the suite's priority: tests.utils.CHILD_DEFAULTS
    done = run([sys.executable, str(WORKERS / "ray_stages.py"), str(out)], env=env, pythonpath=site, timeout=1100)
    assert done.returncode == 0, done.stderr[-4000:]
    row = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert row["data"] == [["cpu", "cpu"]]  # the Ray Data map's workers
    assert row["train"] == {"device": "toy", "ANYDEVICE": "toy", "torch_device": "cpu", "world_size": 1}  # TorchTrainer
    assert row["pool"] == [["cpu", "cpu"]]  # the actor pool
    assert row["asked"] == {"data": None, "train": {"toy_chip": 1}}
    print("phase seconds:", row["seconds"])  # init, data, train, pool: which part grew, when this test is slow
