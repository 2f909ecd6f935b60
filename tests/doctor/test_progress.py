"""anydevice.cli.progress: a bar on a terminal (a real pty), plain lines in logs and pipes."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import textwrap

from anydevice.cli.progress import Progress, track
from tests.utils import REPO, child_env

SCRIPT = textwrap.dedent("""
    import sys
    from anydevice.cli.progress import Progress
    with Progress(3, "probing") as progress:
        for name in ("alpha", "beta", "gamma"):
            progress.advance(name)
        progress.note("a note")
        progress.close("3 probes done")
""")


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    with Progress(3, "probing", stream=out) as progress:
        for name in ("alpha", "beta", "gamma"):
            progress.advance(name)
        progress.close("3 probes done")
    lines = out.getvalue().splitlines()
    assert [ln.split(" (")[0] for ln in lines[:3]] == ["probing [1/3] alpha", "probing [2/3] beta", "probing [3/3] gamma"]
    assert lines[3] == "3 probes done" and "\r" not in out.getvalue()


def test_plain_lines_are_throttled_but_the_last_always_prints() -> None:
    out = io.StringIO()
    progress = Progress(100, stream=out, min_interval_s=3600)
    for _ in range(100):
        progress.advance()
    lines = out.getvalue().splitlines()
    assert [ln.split(" (")[0] for ln in lines] == ["[1/100]", "[100/100]"]


def test_bar_on_a_terminal_redraws_in_place() -> None:
    out = io.StringIO()
    progress = Progress(4, "train", stream=out, tty=True)
    progress.advance("step", n=2)
    bar = progress.bar(width=60)
    body = bar[bar.index("[") + 1 : bar.index("]")]
    assert bar.startswith("train [") and "] 2/4 " in bar and len(bar) < 60
    assert body.count("#") == len(body) // 2 and set(body) == {"#", "-"}  # half done, half to go
    progress.note("checkpoint saved")
    progress.close("done")
    text = out.getvalue()
    assert "\r\x1b[Kcheckpoint saved\n" in text and text.endswith("\r\x1b[Kdone\n")


def test_unknown_totals_count_up() -> None:
    out = io.StringIO()
    items = list(track(iter(range(3)), "reading", stream=out))
    assert items == [0, 1, 2]
    assert out.getvalue().splitlines()[2].startswith("reading [3] (")


def test_a_failure_is_reported_on_exit() -> None:
    out = io.StringIO()
    try:
        with Progress(2, stream=out) as progress:
            progress.advance()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines()[-1].startswith("[1/2] failed")


def _run(stderr_is_a_terminal: bool) -> str:
    env = child_env()
    if not stderr_is_a_terminal:
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
        return done.stderr
    parent, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stderr=child, stdout=subprocess.DEVNULL, cwd=REPO)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(parent, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(parent)
    return b"".join(chunks).decode()


def test_a_real_terminal_gets_the_bar_and_a_pipe_gets_lines() -> None:
    on_tty = _run(stderr_is_a_terminal=True)
    assert "\r" in on_tty and "probing [" in on_tty and "#" in on_tty and "3 probes done" in on_tty
    in_pipe = _run(stderr_is_a_terminal=False)
    assert "\r" not in in_pipe and "probing [2/3] beta" in in_pipe and in_pipe.rstrip().endswith("3 probes done")
