"""Issue 11 "CLI" cases and issue 14's CLI polish: --version, bare `anydevice`, closed pipes, fell_back, the auto line, help."""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anydevice import __version__
from anydevice.cli import build_parser
from tests.utils import REPO, anydevice_cli, child_env, cli_in_process, python


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
    proc = cli_in_process("info", "--json", env={"ANYDEVICE": selection})
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
    proc = cli_in_process("info")
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
        text = " ".join(cli_in_process(command, "--help").stdout.split())  # unwrapped
        assert "--json" in text and "(default: False)" in text, command


# -- issue 18: settings validated with their real range; doctor without a home ------------------------------
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ANYDEVICE_QUIET", "maybe", "ANYDEVICE_QUIET='maybe' is not a yes/no value."),
        ("ANYDEVICE_DEBUG", "2", "ANYDEVICE_DEBUG='2' is not a yes/no value."),
        ("ANYDEVICE_KEEP_AUTOLOAD", "sometimes", "ANYDEVICE_KEEP_AUTOLOAD='sometimes' is not a yes/no value."),
        ("ANYDEVICE_STRICT", "maybe", "ANYDEVICE_STRICT='maybe' is not a yes/no value."),  # issue 35
        ("ANYDEVICE_CACHE_DIR", "relative/cache", "ANYDEVICE_CACHE_DIR='relative/cache' is not an absolute path"),
        ("LOCAL_RANK", "-1", "LOCAL_RANK='-1' is not a whole number from 0 to 2147483647."),
        ("MASTER_PORT", "70000", "MASTER_PORT='70000' is not a whole number from 0 to 65535."),
        ("ANYDEVICE_LAUNCH_PARENT", "abc", "ANYDEVICE_LAUNCH_PARENT='abc' is not a whole number from 1 to 4194304."),
    ],
)
def test_a_setting_out_of_range_is_one_sentence_naming_it(variable: str, value: str, message: str) -> None:
    for args in (["list"], ["doctor"]):
        proc = cli_in_process(*args, env={variable: value, "ANYDEVICE": "cpu"})
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith(f"anydevice: error: {message}"), proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_bad_strict_value_is_an_error_when_the_device_is_selected_not_at_the_first_step() -> None:
    # issue 35: ANYDEVICE_STRICT=maybe was found only by ad.step(), after the model was built and moved.
    code = "import anydevice as ad\nad.device()\nprint('selected', flush=True)\nad.step()"
    proc = python("-c", code, env={"ANYDEVICE_STRICT": "maybe", "ANYDEVICE": "cpu"})
    assert proc.returncode == 1 and "selected" not in proc.stdout
    assert "ANYDEVICE_STRICT='maybe' is not a yes/no value." in proc.stderr


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "cache"
    a_file.write_text("not a directory")
    proc = cli_in_process("list", env={"ANYDEVICE_CACHE_DIR": str(a_file)})
    assert proc.returncode == 2
    assert proc.stderr == (
        f"anydevice: error: ANYDEVICE_CACHE_DIR={str(a_file)!r} is not a directory.\n"
        "Point ANYDEVICE_CACHE_DIR at a directory, or unset it for ~/.cache/anydevice.\n"
    )


def _homeless_env() -> dict[str, str]:
    return {k: v for k, v in child_env({"ANYDEVICE": "cpu"}).items() if k not in ("HOME", "USER", "LOGNAME")}


def _check_homeless_doctor(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert any(c["name"] == "selection" and c["status"] == "ok" for c in data["checks"])
    assert [c["name"] for c in data["checks"]].count("compile cache") == 1


def test_doctor_works_with_home_and_user_unset() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "anydevice", "doctor", "--json"],
        env=_homeless_env(),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    _check_homeless_doctor(proc)


def test_doctor_works_for_a_uid_without_a_passwd_entry() -> None:
    import pwd
    import shutil

    uid = 12345
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)  # the case: no passwd entry, so no home directory can be found
    command = [sys.executable, "-m", "anydevice", "doctor", "--json"]
    if os.getuid() == 0 and _runs_as(uid):
        proc = subprocess.run(
            command, env=_homeless_env(), capture_output=True, text=True, cwd="/", timeout=300,
            preexec_fn=functools.partial(_as_uid, uid),
        )  # fmt: skip
    elif shutil.which("unshare") and _unshare_works(uid):  # a user namespace maps us to a uid without an entry
        proc = subprocess.run(
            ["unshare", "--user", f"--map-user={uid}", f"--map-group={uid}", *command],
            env=_homeless_env(),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
    else:
        pytest.skip("cannot run a process as a uid without a passwd entry here (not root, no user namespaces)")
    _check_homeless_doctor(proc)
    home_check = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "compile cache")
    assert home_check["status"] == "warn" and home_check["message"].startswith("no home directory to keep the compile caches")


def _as_uid(uid: int) -> None:
    os.setgid(uid)
    os.setuid(uid)


def _runs_as(uid: int) -> bool:
    """Whether this interpreter and the repository can be used by ``uid`` (not when they live under /root)."""
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import anydevice"], preexec_fn=functools.partial(_as_uid, uid), capture_output=True,
            cwd="/", timeout=120, check=False, env=_homeless_env(),
        )  # fmt: skip
    except OSError:
        return False
    return probe.returncode == 0


def _unshare_works(uid: int) -> bool:
    done = subprocess.run(["unshare", "--user", f"--map-user={uid}", "true"], capture_output=True, timeout=60, check=False)
    return done.returncode == 0


# -- matrix probe: --out checked first, a probe's children end with it ---------------------------------------
def test_matrix_probe_refuses_an_unwritable_out_before_any_probe(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, so nothing can be created under it (permission bits do not stop root)")
    out = blocker / "results" / "cpu.json"
    proc = anydevice_cli("matrix", "probe", "--out", str(out), env={"ANYDEVICE": "cpu"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"anydevice: error: --out {out} cannot be written: "), proc.stderr
    assert "no probe was run" in proc.stderr
    assert "sanity" not in proc.stdout + proc.stderr  # refused before the first probe, not after the last
    directory = anydevice_cli("matrix", "probe", "--out", str(tmp_path), env={"ANYDEVICE": "cpu"})
    assert directory.returncode == 2 and "is a directory" in directory.stderr


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its parent (init here) has not collected it yet


def test_a_probes_child_processes_end_with_the_probe(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    proc = anydevice_cli(
        "matrix",
        "probe",
        "--only",
        "zz_orphan",
        "--module",
        "tests.hostile.grandchild_probes",
        "--timeout",
        "5",
        env={"ANYDEVICE": "cpu", "ANYDEVICE_TEST_PIDS": str(pids)},
        timeout=600,
    )
    started = [int(line) for line in pids.read_text().split()]
    try:
        assert len(started) == 2, (proc.stdout, proc.stderr)  # both probes ran (the second in a fresh worker)
        assert [pid for pid in started if _alive(pid)] == []
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, 9)
