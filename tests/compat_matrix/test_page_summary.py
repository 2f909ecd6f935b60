"""The page for choosing hardware: summary grid, versions table, failure sources, a GPU column, no empty section."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from anydevice.compat_matrix.claims import Source, origin
from anydevice.compat_matrix.merge import build_matrix, supported_text, tally
from anydevice.compat_matrix.page import build_site
from anydevice.compat_matrix.schema import Claim, Stage, Status, dump_run, load_run
from anydevice.compat_matrix.versions_table import plugin_versions
from tests.compat_matrix.builders import FIXTURES, result, run

REPO = Path(__file__).resolve().parents[2]


def test_failure_sources() -> None:
    fail = result("x", Status.FAIL)
    cpu = run([fail])
    assert origin(cpu, fail) == origin(cpu, fail) and origin(cpu, fail).source is Source.DEVICE  # type: ignore[union-attr]
    xla = run([fail], plugin="xla", vendor=("torch_xla", "2.9.0"))
    found = origin(xla, fail)
    assert found is not None and found.source is Source.VENDOR and "torch_xla 2.9.0" in found.why
    fake = run([fail], plugin="neuron", vendor=("torch-neuronx", "2.14.0"), simulated=True)
    found = origin(fake, fail)
    assert found is not None and found.source is Source.SIMULATION and "says nothing about the real hardware" in found.why
    ours = result("y", Status.FAIL, exception_type="anydevice.errors.UnsupportedFeatureError")
    assert origin(fake, ours).source is Source.PLUGIN  # type: ignore[union-attr]  # anydevice raised, even when simulated
    declared = result("z", Status.FAIL, expected=Claim(supported=False, reason="no pinned memory here"))
    found = origin(xla, declared)
    assert found is not None and found.source is Source.PLUGIN and "no pinned memory here" in found.why
    at_import = result("i", Status.FAIL, failure_stage=Stage.IMPORT)
    assert origin(cpu, at_import).source is Source.VENDOR  # type: ignore[union-attr]
    harness = result("h", Status.HARNESS_ERROR)
    assert origin(cpu, harness).source is Source.HARNESS  # type: ignore[union-attr]
    assert origin(cpu, result("ok")) is None and origin(cpu, result("s", Status.SKIP)) is None


def test_group_tally_worst_status_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    dump_run(
        run(
            [
                result("sanity", shim="sanity"),
                result("a", shim="placement"),
                result("b", Status.SKIP, shim="placement"),
                result("c", shim="ops"),
                result("d", Status.FAIL, shim="ops"),
            ]
        ),
        path,
    )
    matrix = build_matrix([path])
    column = matrix.columns[0]
    placement = tally(matrix, column, "placement")
    assert (placement.worst, placement.working, placement.total) == ("pass", 1, 2)  # a skip does not hide the passes
    ops = tally(matrix, column, "ops")
    assert (ops.worst, ops.working, ops.total, dict(ops.sources)) == ("fail", 1, 2, {Source.DEVICE: 1})
    overall = tally(matrix, column)
    assert overall.ordered() == [("fail", 1), ("pass", 3), ("skip", 1)]


def test_a_gpu_column_appears_as_soon_as_a_cuda_result_exists(tmp_path: Path) -> None:
    cpu = run([result("sanity", shim="sanity"), result("matmul")])
    gpu = run(
        [result("sanity", shim="sanity"), result("matmul"), result("sdpa", Status.FAIL)],
        plugin="cuda",
        chip="NVIDIA H200",
        vendor=("torch", "2.13.0"),
    )
    dump_run(cpu, tmp_path / "cpu.json")
    dump_run(gpu, tmp_path / "cuda-h200.json")
    site = build_site([tmp_path / "cpu.json", tmp_path / "cuda-h200.json"])
    html, markdown = site.files["index.html"], site.files["index.md"]
    assert '<div class="label">cuda · NVIDIA H200</div>' in html
    grid = html.split('<table id="summary-grid">')[1].split("</table>")[0]
    assert "cuda · NVIDIA H200" in grid and "1/2 work" in grid and "failures: 1 from the device" in grid
    versions = html.split('<table id="versions-table">')[1].split("</table>")[0]
    cuda_row = re.search(r'<tr data-plugin="cuda">.*?</tr>', versions, re.S)
    assert cuda_row is not None and "torch 2.13.0" in cuda_row.group(0) and "not run here" not in cuda_row.group(0)
    # per torch version: the cuda result file makes 2.13 tested, the other claimed versions stay declared
    assert re.search(
        r"^\| cuda \| torch \| .* \| c\d: torch 2\.13\.0 \| (declared \| ){4}\*\*tested\*\* \| declared \| declared \|$",
        markdown,
        re.M,
    )
    assert '<td class="v-tested" title="result file cuda-h200.json (NVIDIA H200, torch 2.13.0)">tested</td>' in cuda_row.group(0)


def test_versions_table_lists_every_builtin_plugin_and_the_pairs_run() -> None:
    matrix = build_matrix(sorted((REPO / "compat_matrix" / "results").glob("*.json")))
    rows = {r.plugin: r for r in plugin_versions(matrix)}
    assert {"cpu", "cuda", "tpu", "neuron", "xla", "mps", "xpu"} <= set(rows)
    assert rows["xla"].vendor_package == "torch_xla" and "lockstep" in rows["xla"].supported
    assert "Requires-Dist" in rows["tpu"].supported and rows["tpu"].vendor_package == "torch_tpu"
    assert rows["cuda"].columns == [] and rows["xla"].columns
    assert supported_text(None).startswith("torch 2.9 to 2.15")


def test_no_empty_sections_in_markdown() -> None:
    for files in ([FIXTURES / "cpu-new.json"], sorted(FIXTURES.glob("*.json"))):
        markdown = build_site(files).files["index.md"]
        lines = [line for line in markdown.splitlines() if line.strip()]
        for here, after in itertools.pairwise(lines):
            if here.startswith("## "):
                assert not after.startswith("## "), f"empty section {here!r}"
        assert lines[-1][:3] != "## " and "None." not in lines and "No device has two runs yet." not in markdown
    single = build_site([FIXTURES / "cpu-new.json"])
    assert "## Changes between" not in single.files["index.md"] and 'id="diff"' not in single.files["index.html"]


def test_a_result_file_may_call_the_group_group(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    dump_run(run([result("sanity", shim="sanity"), result("matmul")]), path)
    data = json.loads(path.read_text())
    for r in data["results"]:
        r["group"] = r.pop("shim")
    path.write_text(json.dumps(data))
    assert [r.shim for r in load_run(path).results] == ["sanity", "ops"]
