"""The compatibility matrix's ``serve_vllm`` workload probe passes on cpu in the serve lane.

One run of the command, as scripts/matrix-results runs it: the probe's verdict, its log and the matrix cell all come from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from anydevice.compat_matrix.merge import build_matrix
from anydevice.compat_matrix.schema import Status, dump_run, load_run
from tests.compat_matrix.builders import result

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.long("starts a vLLM server: about a minute on 2 cores")]


@pytest.mark.timeout(1200)
def test_the_matrix_records_the_serving_probe_from_the_serve_lane(tmp_path: Path) -> None:
    """`anydevice matrix probe --only serve_vllm` as scripts/matrix-results runs it: a result file with vLLM's version,
    whose cell joins the cpu column of a main-lane run (which skips it: no vLLM there) as a pass."""
    out = tmp_path / "cpu-serve.json"
    env = {**os.environ, "ANYDEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [sys.executable, "-m", "anydevice", "matrix", "probe", "--only", "serve_vllm", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = load_run(out)
    assert {r.probe: r.status for r in served.results} == {"sanity": Status.PASS, "serve_vllm": Status.PASS}
    assert "vLLM platform CpuPlatform (device type cpu)" in served.results[1].log  # the engine ran on the cpu platform
    assert served.env.packages["vllm-cpu"] == metadata.version("vllm-cpu")
    main = served.model_copy(
        update={
            "run_id": "main-lane",
            "env": served.env.model_copy(update={"packages": {}}),
            "results": [served.results[0], result("serve_vllm", Status.SKIP, "workloads", reason="vllm is not installed here")],
        }
    )
    dump_run(main, tmp_path / "cpu.json")
    matrix = build_matrix([tmp_path / "cpu.json", out])
    (column,) = matrix.columns
    assert matrix.cell("serve_vllm", column).status is Status.PASS
