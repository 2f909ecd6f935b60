"""The matrix's litert column for real: `anydevice matrix probe --target litert` converts, runs in LiteRT, compares."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anydevice.compat_matrix.schema import Stage, Status, load_run
from tests.utils import anydevice_cli

pytestmark = pytest.mark.litert
pytest.importorskip("litert_torch", reason="litert-torch is not installed: the litert lane (requirements/litert.txt) has it")


def test_export_probes_pass_for_a_convertible_model_and_fail_naming_the_op_litert_lacks(tmp_path: Path) -> None:
    out = tmp_path / "litert.json"
    env = {k: v for k, v in os.environ.items() if k != "ANYDEVICE"}
    proc = anydevice_cli(
        "matrix", "probe", "--target", "litert", "--only", "export_litert_mlp,export_litert_linalg_svd", "--out", str(out),
        "--timeout", "600", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = load_run(out)
    assert run.export is not None and run.export.target == "litert"
    assert {"litert-torch", "ai-edge-litert"} <= set(run.env.runtimes) and run.plugin.name == "cpu"
    assert run.invocation.command.startswith("ANYDEVICE=cpu anydevice matrix probe --target litert")
    results = {r.probe: r for r in run.results}
    assert list(results) == ["sanity", "export_litert_mlp", "export_litert_linalg_svd"]
    mlp = results["export_litert_mlp"]
    assert mlp.status is Status.PASS and mlp.numerics is not None
    assert mlp.numerics.max_abs_err is not None and mlp.numerics.max_abs_err <= 1e-4 and mlp.numerics.atol == 1e-4
    svd = results["export_litert_linalg_svd"]
    assert svd.status is Status.FAIL and svd.failure_stage is Stage.COMPILE and svd.expected is None
    assert svd.reason is not None and "the op aten._linalg_svd has no LiteRT lowering at " in svd.reason
    assert "probes_export.py:" in svd.reason  # the source line of the op, as `anydevice check` names lines


def test_another_selected_device_is_refused_before_any_probe(tmp_path: Path) -> None:
    env = dict(os.environ, ANYDEVICE="xla")
    proc = anydevice_cli("matrix", "probe", "--target", "litert", "--out", str(tmp_path / "r.json"), env=env)
    assert proc.returncode == 2 and "--target litert probes export on the host CPU, but ANYDEVICE=xla" in proc.stderr
    assert not (tmp_path / "r.json").exists()
