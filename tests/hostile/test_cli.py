"""Issue 11 "CLI" cases and issue 14's CLI polish: --version, bare `anydevice`, closed pipes, fell_back, the auto line, help."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from anydevice import __version__
from anydevice.cli import build_parser
from tests.utils import REPO, anydevice_cli, child_env, python


def test_version() -> None:
    proc = anydevice_cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"anydevice {__version__}\n", "")


def test_bare_anydevice_prints_help_as_a_usage_error() -> None:
    proc = anydevice_cli()
    assert (proc.returncode, proc.stdout) == (2, "")  # exit 2 and help on stderr, as click (llm, datasette) and git do
    assert proc.stderr.startswith("usage: anydevice [-h] [--version] COMMAND ...\n")
    for command in ("list", "info", "doctor", "run", "matrix"):
        assert re.search(rf"^    {command} +\S", proc.stderr, re.M), command


def test_help_is_a_success() -> None:
    proc = anydevice_cli("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: anydevice") and proc.stderr == ""


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["info"], ["doctor"]])
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    # the reader is gone before the command writes a byte: every write fails with EPIPE
    proc = subprocess.Popen(
        [sys.executable, "-m", "anydevice", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env({"ANYDEVICE": "cpu"}),
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=300) == 141  # as a shell reports a process ended by SIGPIPE
    assert stderr == ""


def test_list_piped_into_head_prints_one_line_and_no_traceback() -> None:
    proc = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -m anydevice list | head -1"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1 and proc.stderr == ""


# -- fell_back and the auto line (issue 14) -----------------------------------------------------------
@pytest.mark.parametrize(("selection", "fell_back"), [("auto", False), ("cpu", False), ("cpu,tpu", False), ("tpu,cpu", True)])
def test_fell_back_is_true_only_when_a_named_earlier_choice_was_unusable(selection: str, fell_back: bool) -> None:
    proc = anydevice_cli("info", "--json", env={"ANYDEVICE": selection})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["backend"]["fell_back"] is fell_back


def test_the_auto_line_is_short_and_points_at_info() -> None:
    proc = python("-c", "import anydevice as ad; ad.device()")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(
        r"anydevice: using cpu \(auto: the available device with the highest priority; \d+ higher-priority device\(s\) "
        r"unavailable; `anydevice info` says why\)",
        lines[0],
    ), lines[0]
    assert len(lines[0]) < 150


def test_info_does_not_repeat_the_auto_line_and_keeps_the_full_why() -> None:
    proc = anydevice_cli("info")
    assert proc.returncode == 0
    assert proc.stderr == ""
    why = next(line for line in proc.stdout.splitlines() if line.startswith("why"))
    assert why.startswith("why        auto: cpu is the available device with the highest priority (tpu: ")


# -- help texts and defaults ------------------------------------------------------------------------
def _options(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub.add_help:  # the delegated commands parse their own options (doctor, run, matrix)
                    found += [(f"{name} {a.dest}", a) for a in sub._actions]
        else:
            found.append((action.dest, action))
    return found


def test_every_option_has_help_and_shows_its_default() -> None:
    parser = build_parser()
    options = _options(parser)
    assert {name for name, _ in options} >= {"help", "version", "list json", "info json"}
    for name, action in options:
        assert action.help and action.help != argparse.SUPPRESS, name
    for command in ("list", "info"):
        text = " ".join(anydevice_cli(command, "--help").stdout.split())  # unwrapped
        assert "--json" in text and "(default: False)" in text, command
