"""`anydevice check` on scripts made to fail one check each: the report names each problem with its source line.

Every run is real: the script runs its first steps on the CPU in a child process; the targets are judged
from their plugins' declarations (TPU: static shapes, no float64, whole slices). The command itself runs in
this process (``cli_in_process``) where a test reads its report; bad input, which also checks that nothing
is left behind (temporary files, processes), runs it as a command.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from anydevice.preflight.schema import RAN_ON_CPU, Report
from tests.utils import REPO, anydevice_cli, cli_in_process

pytestmark = pytest.mark.slow

CASES = REPO / "tests" / "check" / "scripts" / "cases.py"
LINES = CASES.read_text().splitlines()


def marker(case: str) -> str:
    """``cases.py:N`` of the line marked ``# CHECK: case``."""
    return f"cases.py:{next(i for i, line in enumerate(LINES, 1) if f'# CHECK: {case}' in line)}"


@functools.cache
def checked(case: str, *extra: str) -> tuple[int, Report]:
    done = cli_in_process("check", str(CASES), case, "--target", "tpu,cpu", "--json", *extra)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, Report.model_validate_json(done.stdout)


def findings(report: Report, target: str, check: str) -> list[Any]:
    return [f for t in report.targets if t.target == target for f in t.findings if f.check == check]


def test_a_clean_model_runs_everywhere_and_the_json_is_the_schema() -> None:
    code, report = checked("clean")
    assert code == 0 and report.ok and report.kind == RAN_ON_CPU
    assert [t.verdict for t in report.targets] == ["runs", "runs"]
    assert report.observation.steps == 4 and report.observation.memory is not None
    assert report.observation.memory.optimizer == "AdamW" and report.observation.memory.optimizer_state > 0


def test_a_data_dependent_branch_is_a_graph_break_and_a_host_read_at_its_line() -> None:
    _, report = checked("branch")
    breaks = findings(report, "tpu", "capture")
    assert any(f.line and f.line.endswith(marker("branch")) for f in breaks), breaks
    reads = findings(report, "tpu", "shapes")
    assert any("_local_scalar_dense" in f.message and f.line.endswith(marker("branch")) for f in reads), reads


def test_nonzero_is_named_at_its_line() -> None:
    _, report = checked("nonzero")
    shapes = findings(report, "tpu", "shapes")
    assert any("aten::nonzero" in f.message and f.line.endswith(marker("nonzero")) for f in shapes), shapes
    assert any("Dynamic shape operator" in f.message for f in findings(report, "tpu", "capture"))


def test_a_float64_buffer_will_not_compile_on_tpu_but_runs_on_cpu() -> None:
    code, report = checked("float64")
    assert code == 1 and not report.ok
    tpu, cpu = report.targets
    assert tpu.verdict == "will not compile" and cpu.verdict == "runs"
    errors = [f for f in findings(report, "tpu", "dtypes") if f.severity == "error"]
    assert errors and "float64" in errors[0].message and errors[0].line.endswith(marker("float64"))
    assert tpu.fixes and "float32" in tpu.fixes[0]


def test_a_sequence_length_that_varies_per_batch_recompiles_on_static_shape_targets() -> None:
    code, report = checked("varying")
    tpu, cpu = report.targets
    assert len(report.observation.signatures) > 1 and code == 1
    assert tpu.verdict == "will recompile" and tpu.recompiles == len(report.observation.signatures) - 1
    assert tpu.summary == f"will recompile {tpu.recompiles} time(s)" and "pad" in tpu.fixes[0]
    assert cpu.verdict == "runs"  # dynamic shapes: no recompiles predicted


def test_three_processes_are_not_a_whole_tpu_slice() -> None:
    code, report = checked("clean", "-n", "3")
    tpu = report.targets[0]
    assert code == 1 and tpu.verdict == "will not launch"
    (error,) = findings(report, "tpu", "distributed")
    assert "3 process(es) is not a whole tpu slice" in error.message and "TPU v5e {1, 4, 8}" in error.message


def test_cuda_only_calls_are_reported_from_cuda_compat_with_their_source_line() -> None:
    _, report = checked("cuda")
    lines = {c.call: c.line for c in report.observation.cuda_calls}
    sync = lines.get("torch.cuda.synchronize()")
    assert sync is not None and sync.endswith(marker("cuda")), lines
    assert all(line and "cases.py:" in line for line in lines.values()), lines  # every call is the script's, none torch's
    found = [f for f in findings(report, "tpu", "cuda_calls") if "synchronize" in f.message]
    assert found and found[0].line == sync


def test_the_text_report_shows_each_cuda_call_at_its_line() -> None:
    done = cli_in_process("check", str(CASES), "cuda", "--target", "tpu")
    shown = [line for line in done.stdout.splitlines() if "cuda_calls" in line and "synchronize" in line]
    assert shown and shown[0].rstrip().endswith(f"{marker('cuda')})"), done.stdout


def test_the_text_report_says_what_ran_where_with_versions() -> None:
    done = cli_in_process("check", str(CASES), "float64", "--target", "tpu")
    assert done.returncode == 1
    assert "first steps run on the CPU, judged per target; not a run on the target" in done.stdout and "torch " in done.stdout
    assert "tpu: WILL NOT COMPILE" in done.stdout and marker("float64") in done.stdout
    assert any(line.startswith("  ops: ") and "unknown" in line for line in done.stdout.splitlines())  # a mark per op


def test_bad_input_gets_one_clear_message_and_leaves_nothing(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    unknown = anydevice_cli("check", str(CASES), "clean", "--target", "tpu,gpuz", env=env)
    assert unknown.returncode == 2 and "Unknown device 'gpuz'" in unknown.stderr
    failing = tmp_path / "fails.py"
    failing.write_text(
        "import torch\nloader = torch.utils.data.DataLoader([1, 2])\nfor b in loader:\n    raise ValueError('boom')\n"
    )
    failed = anydevice_cli("check", str(failing), "--target", "tpu", env=env)
    assert failed.returncode == 2 and "failed on the CPU before its first step at" in failed.stderr
    assert "fails.py:4" in failed.stderr and "ValueError: boom" in failed.stderr
    bare = tmp_path / "bare.py"
    bare.write_text("import torch\nm = torch.nn.Linear(2, 2)\nm(torch.randn(1, 2)).sum().backward()\n")
    no_step = anydevice_cli("check", str(bare), "--target", "tpu", env=env)
    assert no_step.returncode == 2 and "never stepped an optimizer (and iterated no DataLoader)" in no_step.stderr
    usage = anydevice_cli("check", "--target", "tpu", env=env)
    assert usage.returncode == 2 and "No script given" in usage.stderr
    assert list(tmp.iterdir()) == []  # nothing left in the temporary directory
    leftover = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(tmp) in _environ(p)]
    assert leftover == []  # no process of the checks survives


def _environ(proc: Path) -> str:
    try:
        return (proc / "environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_json_schema_round_trips() -> None:
    _, report = checked("clean")
    data = json.loads(report.model_dump_json())
    assert Report.model_validate(data) == report
    assert os.environ.get("ANYDEVICE_STRICT") is None


def test_an_avg_reduction_the_backend_lacks_will_not_launch_there_at_its_line() -> None:
    done = cli_in_process("check", str(CASES), "avg", "--target", "xla,cpu", "--json")
    assert done.returncode == 1, done.stderr
    report = Report.model_validate_json(done.stdout)
    xla, cpu = report.targets
    assert xla.verdict == "will not launch" and cpu.verdict == "runs"
    uses = {(c.reduce_op, c.via_anydevice): c.line for c in report.observation.collectives}
    assert uses[("AVG", False)].endswith(marker("avg")) and uses[("AVG", True)].endswith(marker("ad-avg")), uses
    (error,) = [f for f in findings(report, "xla", "distributed") if f.severity == "error"]
    assert "ReduceOp.AVG" in error.message and "'xla' process group" in error.message and error.line.endswith(marker("avg"))
    emulated = [f for f in findings(report, "xla", "distributed") if f.severity == "info"]
    assert emulated and emulated[0].line.endswith(marker("ad-avg"))  # ad.distributed emulates it: not an error
    assert not [f for f in findings(report, "cpu", "distributed") if f.severity != "info"]


def test_a_tp_degree_that_does_not_divide_the_world_will_not_launch() -> None:
    code, report = checked("clean", "-n", "8", "--mesh", "dp=-1,tp=3")
    assert code == 1 and report.observation.mesh == {"dp": -1, "tp": 3}
    for target in ("tpu", "cpu"):
        (error,) = findings(report, target, "distributed")
        assert "tp=3" in error.message and "does not divide the world of 8" in error.message


def test_a_mesh_alone_sets_the_world_and_is_checked_against_whole_slices() -> None:
    code, report = checked("clean", "--mesh", "dp=2,tp=4")
    assert code == 0 and report.observation.world_size == 8  # a whole slice on v4, v5e, v6e, v7
    code, report = checked("clean", "--mesh", "dp=1,tp=16")
    tpu = report.targets[0]
    assert code == 1 and tpu.verdict == "will not launch" and report.targets[1].verdict == "runs"
    messages = [f.message for f in findings(report, "tpu", "distributed")]
    assert any("16 process(es) is not a whole tpu slice" in m for m in messages)
    assert any("mesh axis tp=16 divides no whole tpu slice" in m for m in messages), messages


def test_a_mesh_that_is_not_axis_sizes_is_a_usage_error() -> None:
    done = cli_in_process("check", str(CASES), "clean", "--target", "tpu", "--mesh", "dp:2")
    assert done.returncode == 2 and "is not AXIS=N" in done.stderr


def test_the_scripts_own_mesh_is_checked_at_its_line() -> None:
    code, report = checked("mesh", "-n", "8")
    assert code == 1 and report.observation.mesh == {"dp": -1, "tp": 3} and report.observation.world_size == 8
    for target in ("tpu", "cpu"):
        (error,) = findings(report, target, "distributed")
        assert "does not divide the world of 8" in error.message and error.line.endswith(marker("mesh"))
    code, report = checked("mesh")  # no -n: the world is what the mesh names (3), not a whole TPU slice
    tpu, cpu = report.targets
    assert report.observation.world_size == 3 and tpu.verdict == "will not launch" and cpu.verdict == "runs"
    straddles = [f for f in findings(report, "tpu", "distributed") if "tp=3 divides no whole tpu slice" in f.message]
    assert straddles and straddles[0].line.endswith(marker("mesh"))
