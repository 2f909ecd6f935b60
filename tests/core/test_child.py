"""The one child-process supervisor (anydevice/runtime/child.py), used by plugin vetting and the matrix's workers."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from anydevice.runtime.child import Child, ending


def module(tmp_path: Path, source: str) -> dict[str, str]:
    """An environment in which ``python -m sample`` runs ``source``."""
    (tmp_path / "sample.py").write_text(textwrap.dedent(source))
    return {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"}


def collect(child: Child, timeout: float = 30) -> list[tuple[str, str]]:
    lines = []
    while (line := child.next(timeout)) is not None:
        lines.append(line)
        if line[0] == "end":
            break
    return lines


def test_messages_on_stdout_and_the_request_on_stdin(tmp_path: Path) -> None:
    env = module(tmp_path, "import sys\nprint('got', sys.stdin.read())\nprint('no newline at the end', end='')\n")
    with Child("sample", "hello", env=env) as child:
        lines = collect(child)
        assert child.wait() == 0
    assert lines == [("message", "got hello\n"), ("message", "no newline at the end"), ("end", "")]


def test_with_a_channel_stdout_is_output_and_comes_before_the_message_written_after_it(tmp_path: Path) -> None:
    source = """
    import os, socket, sys
    fd = int(sys.argv[2])
    print('{"looks": "like a message"}', flush=True)
    os.write(fd, b'real\\n')
    channel = socket.socket(fileno=fd)
    assert channel.recv(1) == b'\\n'  # waits for the go-ahead
    print('after the go-ahead', file=sys.stderr, flush=True)
    """
    with Child("sample", "", env=module(tmp_path, source), channel=True) as child:
        first, second = child.next(30), child.next(30)
        child.go_ahead()
        rest = collect(child)
    assert first == ("output", '{"looks": "like a message"}\n') and second == ("message", "real\n")
    assert rest == [("output", "after the go-ahead\n"), ("end", "")]


def test_close_kills_what_the_child_started_and_a_deadline_returns_none(tmp_path: Path) -> None:
    source = """
    import subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
    print(grandchild.pid, flush=True)
    time.sleep(600)
    """
    with Child("sample", "", env=module(tmp_path, source)) as child:
        kind, pid = child.next(30) or ("", "")
        assert kind == "message"
        start = time.monotonic()
        assert child.next(0.3) is None and time.monotonic() - start < 10
    assert child.proc.returncode == -9
    for _ in range(100):  # the grandchild, in the child's process group, is gone (reaped by init)
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the grandchild outlived close()")


def test_how_a_child_ended_is_a_phrase() -> None:
    assert ending(-11) == "crashed the process (SIGSEGV)" and ending(3) == "ended the process (exit status 3)"


def test_no_python_is_an_os_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "")
    with pytest.raises(OSError, match="no Python executable"):
        Child("sample", "", env={})
