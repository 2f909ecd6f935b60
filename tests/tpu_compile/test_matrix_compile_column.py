"""`anydevice matrix probe --target tpu:v5e-8`: the compile probes' steps compiled by libtpu here (tpu-check lane).

The result file and the page's column must say "compiled, not run", with the compiler's versions, and carry the
compiler's own verdicts: the four ordinary steps compile and fit; the boolean-mask index and the float64 buffer
are refused at compile, naming what the compiler (or the check before it) refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anydevice.compat_matrix.merge import build_matrix, column_evidence
from anydevice.compat_matrix.page import build_site
from anydevice.compat_matrix.schema import Stage, Status, load_run
from tests.utils import anydevice_cli

pytestmark = pytest.mark.tpu_compile


def test_the_compile_column_holds_the_compilers_verdicts_and_says_compiled_not_run(tmp_path: Path) -> None:
    out = tmp_path / "tpu-v5e-8.json"
    env = {k: v for k, v in os.environ.items() if k != "ANYDEVICE"}
    proc = anydevice_cli("matrix", "probe", "--target", "tpu:v5e-8", "--out", str(out), "--timeout", "600", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = load_run(out)
    assert run.export is not None and run.export.kind == "compile" and run.export.target == "tpu:v5e-8"
    assert {"libtpu", "jax", "torchax"} <= set(run.export.versions) and "never run" in run.export.runs_on
    results = {r.probe: r for r in run.results}
    compiled = ["compile_tpu_mlp_adamw", "compile_tpu_mlp_fsdp", "compile_tpu_convnet_sgd", "compile_tpu_causal_lm"]
    assert [results[name].status for name in compiled] == [Status.PASS] * 4
    assert "mesh {'fsdp': 8}: fits" in results["compile_tpu_mlp_fsdp"].log  # sharded over the slice's 8 chips
    assert "all-gather" in results["compile_tpu_mlp_fsdp"].log and "of 15.75" in results["compile_tpu_mlp_adamw"].log
    mask, f64 = results["compile_tpu_mask_index"], results["compile_tpu_float64_buffer"]
    assert mask.status is Status.FAIL and mask.failure_stage is Stage.COMPILE
    assert "boolean indices must be concrete" in (mask.message or "") and "probes_compile.py:" in (mask.message or "")
    assert f64.status is Status.FAIL and f64.failure_stage is Stage.COMPILE and "float64" in (f64.message or "")

    matrix = build_matrix([out])
    (column,) = matrix.columns
    assert column.label.startswith("tpu:v5e-8 compiled, not run · on host CPU")
    evidence = column_evidence(column)
    assert evidence.level == "compiled" and "libtpu 0.0.42.1" in evidence.source and not evidence.verified_on_hardware
    page = build_site([out]).files
    assert "tpu:v5e-8 compiled, not run" in page["index.md"] and "compiled by the vendor's compiler, not run" in page["index.md"]
    assert "tpu:v5e-8 compiled, not run" in page["index.html"] and "compile_tpu_causal_lm" in page["index.html"]


def test_a_slice_no_compiler_knows_is_refused_listing_the_valid_ones(tmp_path: Path) -> None:
    proc = anydevice_cli("matrix", "probe", "--target", "tpu:v9z-8", "--out", str(tmp_path / "r.json"))
    assert proc.returncode != 0 and "v5e" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.json").exists()
