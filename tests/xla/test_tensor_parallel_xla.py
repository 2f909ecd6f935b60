"""ad.distributed.parallelize on torch_xla SPMD (PJRT CPU, 4 devices, one process) equals the cpu run within 1e-4."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import TRAIN, child_env

pytestmark = [pytest.mark.torch_version_sensitive, pytest.mark.xla, pytest.mark.slow]
pytest.importorskip("torch_xla")

WORKER = Path(__file__).parent / "fixtures" / "spmd_tp.py"


def _run(*args: str, device: str = "xla") -> dict[str, object]:
    env = child_env({"ANYDEVICE": device, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "ANYDEVICE_QUIET": "1"})
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    row: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


@pytest.mark.parametrize(("dp", "tp"), [(1, 4), (2, 2)])
def test_spmd_split_equals_cpu_and_each_weight_is_sharded_on_tp(dp: int, tp: int) -> None:
    row = _run(str(WORKER), str(dp), str(tp))
    assert row["mesh"] == {"dp": dp, "tp": tp}
    assert row["losses"] == pytest.approx(row["cpu"], abs=1e-4)
    tail = " last_tile_dim_replicate" if dp > 1 else ""
    devices = "0,1,2,3" if dp == 1 else "0,2,1,3"
    for specs in (row["specs"], row["after"]):  # as split, and after 5 optimizer steps
        assert isinstance(specs, dict)
        assert specs["up.weight"] == f"{{devices=[{tp},1{',' + str(dp) if dp > 1 else ''}]{devices}{tail}}}"
        assert specs["down.weight"] == f"{{devices=[1,{tp}{',' + str(dp) if dp > 1 else ''}]{devices}{tail}}}"
        assert specs["embed.weight"] == specs["down.weight"]  # embedding_colwise: the embedding dim split
        assert specs["up.bias"].startswith(f"{{devices=[{tp}")
        assert specs["down.bias"] in ("", "{replicated}")  # rowwise bias: replicated


def test_main_job_tp_runs_one_process_over_the_host_devices_and_matches_cpu() -> None:
    common = (str(TRAIN), "--steps", "3", "--log-every", "0")
    xla = _run(*common, "--parallel", "tp", "--tp", "2")
    cpu = _run(*common, "--batch-size", "32", device="cpu")  # dp=2 replicas x 16 rows: the same global batch
    assert xla["mesh"] == {"dp": 2, "tp": 2} and xla["world_size"] == 1 and xla["parallel"] == "tp"
    assert xla["losses"] == pytest.approx(cpu["losses"], abs=1e-4)


def test_spmd_checkpoint_loads_on_cpu(tmp_path: Path) -> None:
    worker = Path(__file__).parents[1] / "distributed" / "workers" / "tp_checkpoint.py"
    saved = _run(str(worker), "save", str(tmp_path / "ckpt"))
    assert saved["mesh"] == {"tp": 4}  # every device of the host
    loaded = _run(str(worker), "load-plain", str(tmp_path / "ckpt"), device="cpu")
    assert loaded["step"] == 1 and loaded["optim_steps"] == [1]
    assert loaded["max_diff"] == 0.0


@pytest.mark.parametrize("model", ["qwenimage", "flux"])
def test_a_split_diffusers_transformer_equals_the_unsplit_one_on_spmd(model: str) -> None:
    pytest.importorskip("diffusers")
    worker = Path(__file__).parents[1] / "distributed" / "workers" / "diffusers_tp.py"
    row = _run(str(worker), model)
    assert row["mesh"] == {"tp": 4}  # every device of the host
    assert row["to_q"] == "{devices=[4,1]0,1,2,3}"  # colwise: output features split over the 4 devices
    assert isinstance(row["scale"], float) and row["scale"] > 0.1
    assert isinstance(row["max_diff"], float) and row["max_diff"] < 1e-5
