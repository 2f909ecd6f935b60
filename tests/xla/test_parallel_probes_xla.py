"""The ``parallel`` probe group on torch_xla SPMD (PJRT CPU, 4 devices, one process), through `anydevice matrix probe`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.utils import run

pytestmark = [pytest.mark.xla, pytest.mark.slow]
pytest.importorskip("torch_xla")


@pytest.mark.timeout(900)
def test_parallel_probes_pass_on_spmd_with_each_weight_sharded(tmp_path: Path) -> None:
    out = tmp_path / "xla.json"
    env = {"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU", "ANYDEVICE_QUIET": "1"}
    done = run([sys.executable, "-m", "anydevice", "matrix", "probe", "--only", "parallel", "--out", str(out)], env, timeout=880)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["probe"]: r for r in json.loads(out.read_text())["results"]}
    assert {n: results[n]["status"] for n in ("tp", "fsdp_tp", "reshard")} == dict.fromkeys(("tp", "fsdp_tp", "reshard"), "pass")
    for name in ("tp", "fsdp_tp"):
        assert results[name]["numerics"]["max_abs_err"] < 1e-4 and results[name]["numerics"]["atol"] == 1e-4
    assert '"blocks.0.up.weight": "{devices=[4,1]0,1,2,3}"' in results["tp"]["log"]  # tp=4 over the 4 devices
    assert '"blocks.0.down.weight": "{devices=[1,4]0,1,2,3}"' in results["tp"]["log"]
    assert "last_tile_dim_replicate" in results["fsdp_tp"]["log"]  # dp=2 x tp=2: replicated over dp
