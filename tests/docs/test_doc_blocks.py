"""Every command and code block in README.md and docs/*.md runs as written, so the docs cannot drift.

docs/architecture.md and docs/plugins.md have their own tests (tests/docs/test_plugin_doc.py and the
contract's). A block right after ``<!-- not-run: why -->`` is not run (the reason is required); its
Python must still parse, and every ``ad.<name>`` / ``from anydevice... import name`` in it must exist.
Otherwise, by the block's language:

- ``python``: written to a file and run in a subprocess with ``ANYDEVICE=cpu``; it must exit 0.
- ``bash`` (``sh``, ``shell``): each command line runs in bash in a scratch directory where
  ``examples/`` is the repo's. The command must be ``anydevice``, ``python`` or ``python3`` (with a
  script that exists): anything else needs the block marked not-run. ``pip install`` lines are never
  run (they would change the environment). A line that names a device not available here
  (``ANYDEVICE=tpu ...``) must fail with anydevice's "not available" error; any other must exit 0.
- ``console``: ``$ command`` lines run the same way and the lines after each one are its documented
  output: every one must appear in what it prints (``...`` skips; "Available here:" lists this
  machine's devices, so only its start is compared). Documented output with an ``error:`` line means
  the command must fail.

Blocks of other languages (output, synopses) are not run.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.utils import REPO, child_env

EXCLUDED = {"architecture.md", "plugins.md"}  # tested by their own tests
DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in EXCLUDED)]
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(?P<why>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
SHELL = {"bash", "sh", "shell"}
RUNNERS = {"anydevice", "python", "python3"}
SLOW = re.compile(r"examples/train\.py|anydevice run|matrix probe(?! --list)|ad\.compile\(|ad\.checkpoint\.")
TIMEOUT = 900


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text (indentation removed), and why it is not run."""

    path: Path
    line: int
    lang: str
    body: str
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def parse_blocks(path: Path, text: str) -> list[Block]:
    """Every fenced block of ``text``; a ``not-run`` comment on the last non-blank line before one marks it."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent = len(fence.group("indent"))
        end = next(j for j in range(i + 1, len(lines)) if re.match(r"^\s*```\s*$", lines[j]))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.match(before)
        body = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        found.append(Block(path, i + 1, fence.group("lang"), body, marker.group("why").strip() if marker else None))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOCS for b in parse_blocks(path, path.read_text(encoding="utf-8"))]


def checked(lang: str) -> bool:
    return lang in ("python", *SHELL, "console")


def params() -> list[object]:
    return [
        pytest.param(
            b,
            id=b.id,
            marks=[pytest.mark.slow, pytest.mark.timeout(3600), pytest.mark.long("a documented command that trains or launches")]
            if b.not_run is None and SLOW.search(b.body)
            else [],
        )
        for b in all_blocks()
        if checked(b.lang)
    ]


# -- running --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory where ``examples/`` is the repo's: what a command writes stays here."""
    root = tmp_path_factory.mktemp("doc-blocks")
    (root / "examples").symlink_to(REPO / "examples")
    return root


def environment(extra: dict[str, str]) -> dict[str, str]:
    env = child_env({"ANYDEVICE_QUIET": "1", **extra})
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@cache
def available(selection: str) -> bool:
    """Whether ``ANYDEVICE=selection`` selects a device on this machine."""
    proc = subprocess.run(
        [sys.executable, "-m", "anydevice", "info", "--json"],
        env=environment({"ANYDEVICE": selection}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode == 0


def commands(body: str) -> list[str]:
    """The command lines of a shell block: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def split(command: str) -> tuple[dict[str, str], list[str]]:
    """``VAR=value ... program args``: the assignments and the words."""
    words = shlex.split(command, comments=True)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def run_command(command: str, workdir: Path, where: str) -> subprocess.CompletedProcess[str] | None:
    """Run one documented command (None for an install line, which is never run); checks it is runnable."""
    words = split(command)[1]
    assert words, f"{where}: {command!r} is not a command"
    if words[0] in ("pip", "pip3") or words[1:3] == ["-m", "pip"]:
        return None
    assert words[0] in RUNNERS and "&&" not in words and "|" not in words, (
        f"{where}: `{command}` is not an anydevice or python command this test can run: "
        "make it one, or mark the block with <!-- not-run: why --> on the line before it"
    )
    scripts = [w for w in words[1:] if w.endswith(".py") and not w.startswith("-")]
    missing = [s for s in scripts if not (workdir / s).exists()]
    assert not missing, f"{where}: `{command}` runs {missing}, which is not in the repo: mark the block not-run"
    return subprocess.run(
        ["bash", "-c", command], cwd=workdir, env=environment({}), capture_output=True, text=True, timeout=TIMEOUT
    )


def expect_usable_or_refused(command: str, proc: subprocess.CompletedProcess[str], where: str) -> None:
    """Exit 0, unless the command names a device this machine lacks: then anydevice's error, exit non-zero."""
    selection = split(command)[0].get("ANYDEVICE")
    if selection is not None and not available(selection):
        assert proc.returncode != 0 and "not available" in proc.stderr, (where, command, proc.stderr[-2000:])
    else:
        assert proc.returncode == 0, f"{where}: `{command}` exited {proc.returncode}:\n{proc.stderr[-3000:]}"


def transcript(body: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines and the documented output after each."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            assert steps, f"output before any $ command: {line!r}"
            steps[-1][1].append(line)
    return steps


def check_output(documented: list[str], printed: str, where: str) -> None:
    lines = [line.rstrip() for line in printed.splitlines()]
    for want in documented:
        if want.strip() == "...":
            continue
        if want.startswith("Available here:"):
            assert any(line.startswith(want.rstrip(".")) for line in lines), (where, want, printed[-2000:])
        else:
            assert want.rstrip() in lines, f"{where}: documented line not printed: {want!r}\nprinted:\n{printed[-3000:]}"


# -- what a block not run must still get right ---------------------------------------------------


def missing_names(tree: ast.AST) -> list[str]:
    """``ad.x.y`` attribute chains and ``from anydevice... import name`` in ``tree`` that do not exist."""
    import anydevice

    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "anydevice":
            module = importlib.import_module(node.module or "")
            missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
        elif isinstance(node, ast.Attribute):
            chain = []
            current: ast.expr = node
            while isinstance(current, ast.Attribute):
                chain.append(current.attr)
                current = current.value
            if isinstance(current, ast.Name) and current.id == "ad":
                obj: object = anydevice
                for part in reversed(chain):
                    if isinstance(obj, type(anydevice)) and not hasattr(obj, part):
                        missing.append("ad." + ".".join(reversed(chain)))
                        break
                    obj = getattr(obj, part, None)
    return sorted(set(missing))


def test_the_parser_finds_blocks_and_markers() -> None:
    text = "a\n<!-- not-run: needs a TPU -->\n\n```python\nx = 1\n```\n  ```bash\n  anydevice list\n  ```\n```\nout\n```\n"
    found = parse_blocks(REPO / "x.md", text)
    assert [(b.lang, b.body, b.not_run, b.line) for b in found] == [
        ("python", "x = 1\n", "needs a TPU", 4),
        ("bash", "anydevice list\n", None, 7),
        ("", "out\n", None, 10),
    ]
    assert split("ANYDEVICE=cpu PJRT_DEVICE=CPU anydevice run -n 2 x.py  # two ranks") == (
        {"ANYDEVICE": "cpu", "PJRT_DEVICE": "CPU"},
        ["anydevice", "run", "-n", "2", "x.py"],
    )
    assert transcript("$ a\nerror: x\nFix: y\n$ b\n") == [("a", ["error: x", "Fix: y"]), ("b", [])]
    assert missing_names(ast.parse("import anydevice as ad\nad.device()\nad.distributed.rank()\nad.nope()\n")) == ["ad.nope"]


def test_every_marker_has_a_reason_and_a_block() -> None:
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            marker = NOT_RUN.match(line)
            if marker:
                assert marker.group("why").strip(), f"{path.name}:{n + 1}: say why the block is not run"
                following = next((x for x in lines[n + 1 :] if x.strip()), "")
                assert FENCE.match(following), f"{path.name}:{n + 1}: a not-run marker must come right before a block"


def test_docs_have_runnable_blocks() -> None:
    blocks = [b for b in all_blocks() if checked(b.lang)]
    assert len([b for b in blocks if b.not_run is None]) >= 5, "fewer runnable blocks than expected: is the parser broken?"


@pytest.mark.parametrize("block", params())
def test_doc_block(block: Block, workdir: Path) -> None:
    where = block.id
    if block.not_run is not None:
        if block.lang == "python":
            tree = ast.parse(block.body, filename=where)  # a fragment still parses, and names only what exists
            assert missing_names(tree) == [], f"{where}: the block names what anydevice does not have"
        return
    if block.lang == "python":
        script = workdir / f"block_{block.path.stem}_{block.line}.py"
        script.write_text(block.body, encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, script.name],
            cwd=workdir,
            env=environment({"ANYDEVICE": "cpu"}),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    elif block.lang == "console":
        steps = transcript(block.body)
        assert steps, f"{where}: a console block needs $ command lines"
        for command, documented in steps:
            proc = run_command(command, workdir, where)
            assert proc is not None, f"{where}: a console transcript of an install is not checkable: mark it not-run"
            fails = any(re.match(r"^(anydevice: )?error:", line) for line in documented)
            assert (proc.returncode != 0) == fails, (where, command, proc.returncode, proc.stderr[-2000:])
            check_output(documented, proc.stdout + proc.stderr, where)
    else:
        for command in commands(block.body):
            proc = run_command(command, workdir, where)
            if proc is not None:
                expect_usable_or_refused(command, proc, where)
