"""examples/train.py under hostile arguments: one line and exit 2 for bad values, exit 1 for a diverging loss.

The argument cases run the job's own parser in this process (each exactly as the command line
would, ``SystemExit`` and stderr included); one case per kind also runs as a real subprocess, to
show what a user sees: no traceback, nothing on stdout.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from tests.utils import TRAIN, python


def _train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("anydevice_main_job_hostile", TRAIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


job = _train_module()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "argument --steps: must be a positive integer, got 0"),
        (["--steps", "-5"], "argument --steps: must be a positive integer, got -5"),
        (["--steps", "ten"], "argument --steps: must be a positive integer, got 'ten'"),
        (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got 0"),
        (["--seq-len", "0"], "argument --seq-len: must be a positive integer, got 0"),
        (["--seq-len", "10000000"], "argument --seq-len: 10000000 is longer than the corpus allows"),
        (["--heads", "3"], "d_model 128 is not divisible by 3 heads"),
        (["--heads", "0"], "argument --heads: must be a positive integer, got 0"),
        (["--kv-heads", "3"], "4 query heads cannot be grouped over 3 key/value heads"),
        (["--d-model", "12"], "head size d_model/heads = 3 must be even for rotary embeddings"),
        (["--lr", "0"], "argument --lr: must be a positive finite number, got 0"),
        (["--lr", "nan"], "argument --lr: must be a positive finite number, got nan"),
        (["--lr", "-0.001"], "argument --lr: must be a positive finite number, got -0.001"),
        (["--log-every", "-1"], "argument --log-every: must be an integer >= 0, got -1"),
        (["--checkpoint-every", "-2"], "argument --checkpoint-every: must be an integer >= 0, got -2"),
        (["--model", "70b"], "argument --model: invalid choice: '70b'"),
        (["--export", "onnx", "m.onnx"], "argument --export: unknown target 'onnx' (targets: litert)"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        job.parse_args(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("train.py: error: "), err  # one line, no usage block
    assert message in err and err.rstrip().endswith("(see --help)")


def test_a_bad_argument_in_a_real_process_shows_no_traceback() -> None:
    proc = python(str(TRAIN), "--heads", "3", env={"ANYDEVICE": "cpu"}, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "train.py: error: the model shape does not work: d_model 128 is not divisible by 3 heads "
        "(--model tiny with --d-model/--heads/--kv-heads) (see --help)"
    ]


def test_a_diverging_loss_exits_1_with_one_line_and_no_result() -> None:
    proc = python(str(TRAIN), "--lr", "1e12", "--steps", "6", "--log-every", "3", env={"ANYDEVICE": "cpu"}, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""  # no JSON result for a run that failed
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the loss is not finite" in errors[0] and "lower --lr (now 1e+12)" in errors[0]
    assert "Traceback" not in proc.stderr


def test_help_shows_every_options_default_and_a_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    parser = job.build_parser()
    for action in parser._actions:  # every option the user can pass
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for shown in ("--steps N", "(default: 200)", "(default: tiny)", "(default: ddp)", "(default: 50)", "(default: 0)"):
        assert shown in text
    options = text.split("options:", 1)[1]
    blocks = re.split(r"\n  (?=-)", options)[1:]  # one block per option, its help text wrapped below it
    assert len(blocks) == len([a for a in parser._actions if a.option_strings])
    for block in blocks:
        if not block.startswith("-h"):
            assert "default" in " ".join(block.split()), f"no default shown: {block}"
