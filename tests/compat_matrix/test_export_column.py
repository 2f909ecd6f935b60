"""An export target's column (``anydevice matrix probe --target litert``): labelled as such, counted on its own probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.cli import main as cli_main
from anydevice.compat_matrix.claims import Source, origin
from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.merge import NOT_APPLICABLE, LoadedRun, merge, tally
from anydevice.compat_matrix.page import page_view
from anydevice.compat_matrix.render_md import render_markdown
from anydevice.compat_matrix.runner import probe_command
from anydevice.compat_matrix.schema import ExportTarget, Stage, Status, load_run
from tests.compat_matrix.builders import result, run

REPO = Path(__file__).resolve().parents[2]
SVD_REASON = "ExportError at compile: Cannot export the model to litert: the op aten._linalg_svd has no LiteRT lowering"


def _export_run() -> LoadedRun:
    results = [
        result("sanity", shim="sanity"),
        result("export_litert_mlp", shim="export", params={"target": "litert"}),
        result("export_litert_linalg_svd", Status.FAIL, shim="export", failure_stage=Stage.COMPILE, reason=SVD_REASON),
    ]
    versions = {"litert-torch": "0.10.0", "ai-edge-litert": "2.3.0"}
    exported = run(results, run_id="litert-export-1").model_copy(
        update={"export": ExportTarget(target="litert", runs_on="LiteRT's CPU interpreter on the host CPU", versions=versions)}
    )
    return LoadedRun("litert.json", exported)


def test_an_export_run_is_its_own_column_counted_on_its_own_probes() -> None:
    device = LoadedRun("cpu.json", run([result("sanity", shim="sanity"), result("matmul"), result("conv2d")]))
    export = _export_run()
    matrix = merge([device, export])
    by_label = {c.label: c for c in matrix.columns}
    assert set(by_label) == {"cpu · Test CPU", "litert export · on host CPU (Test CPU)"}
    litert, cpu = by_label["litert export · on host CPU (Test CPU)"], by_label["cpu · Test CPU"]
    assert "litert-torch 0.10.0" not in cpu.versions  # the device column is the device's alone
    assert (tally(matrix, litert).total, tally(matrix, litert).working) == (3, 2)  # matmul, conv2d: not its probes
    assert (tally(matrix, cpu).total, tally(matrix, cpu).working) == (3, 3)  # the export probes are not the device's
    assert export.device == "litert export / host Test CPU"
    failed = export.run.results[2]
    found = origin(export.run, failed)
    assert found is not None and found.source is Source.VENDOR
    assert found.why == "the litert export (ai-edge-litert 2.3.0, litert-torch 0.10.0) failed at compile"
    assert (
        probe_command(export.run, "export_litert_mlp")
        == "ANYDEVICE=cpu anydevice matrix probe --target litert --only export_litert_mlp"
    )
    markdown = render_markdown(matrix)
    assert f"| matmul | ✔ pass | · {NOT_APPLICABLE} |" in markdown
    assert (
        "| export\\_litert\\_linalg\\_svd | · not this column's probes | ✘ fail at compile, from the vendor package |" in markdown
    )
    summary = {row["column"].label: row for row in page_view(matrix)["summary"]}
    assert summary[litert.label]["note"].startswith("export target, not a device")
    assert [c["label"] for c in summary[cpu.label]["cells"] if c["group"] == "export"] == [NOT_APPLICABLE]


def test_the_committed_litert_column_comes_from_a_real_run() -> None:
    committed = load_run(REPO / "compat_matrix" / "results" / "litert.json")
    assert committed.export is not None and committed.export.target == "litert"
    assert set(committed.export.versions) == {"litert-torch", "ai-edge-litert"}
    assert committed.plugin.name == "cpu" and committed.health.sanity_passed
    status = {r.probe: r for r in committed.results}
    assert {p for p, r in status.items() if r.status is Status.PASS} >= {"sanity", "export_litert_mlp", "export_litert_main_job"}
    svd = status["export_litert_linalg_svd"]
    assert svd.status is Status.FAIL and svd.failure_stage is Stage.COMPILE and svd.reason is not None
    assert "the op aten._linalg_svd has no LiteRT lowering" in svd.reason
    numerics = status["export_litert_main_job"].numerics
    assert numerics is not None and numerics.max_abs_err is not None and numerics.max_abs_err <= 1e-4


def test_export_probes_picked_without_their_target_say_which_target_runs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert main(["probe", "--only", "export_litert_mlp", "--out", str(out)]) == 2
    assert "matches no probe; export probes run with --target litert;" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("tpu:v5e-8", 'pip install "anydevice[tpu-check]"'),
        ("tpu:v9z-8", "v5e"),
        ("onnx", "Unknown target 'onnx'"),
        ("cpu:big-8", "cpu names no slices"),
    ],
)
def test_compile_targets_are_refused_up_front_without_the_compiler_or_with_an_unknown_slice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, target: str, words: str
) -> None:
    """Here (the main lane) jax and libtpu are not installed: a slice target names the extra; an unknown slice
    lists the valid ones; an unknown target lists the targets. No probe runs, nothing is written."""
    monkeypatch.delenv("ANYDEVICE", raising=False)
    out = tmp_path / "r.json"
    assert cli_main(["matrix", "probe", "--target", target, "--out", str(out)]) != 0  # the `anydevice` command
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert not out.exists()


def test_the_committed_compile_column_comes_from_a_real_compile() -> None:
    committed = load_run(REPO / "compat_matrix" / "results" / "tpu-v5e-8-compiled.json")
    assert committed.export is not None and committed.export.kind == "compile" and committed.export.target == "tpu:v5e-8"
    assert set(committed.export.versions) == {"libtpu", "jax", "torchax"}
    status = {r.probe: r for r in committed.results}
    assert status["compile_tpu_causal_lm"].status is Status.PASS and "fits" in status["compile_tpu_causal_lm"].log
    assert status["compile_tpu_mask_index"].status is Status.FAIL
    assert "never run" in committed.export.runs_on
