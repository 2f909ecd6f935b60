"""Do no harm: a program that never names CUDA computes bit-for-bit the same with cuda-compat on and off.

Each program in ``corpus/`` prints one ``DIGEST`` line (SHA-256 of everything it computed); it runs
twice in fresh interpreters, ``ANYDEVICE_CUDA_COMPAT=0`` and ``=1``, and the lines must be equal. The
XLA lane runs the same corpus with ``ANYDEVICE=xla``. Add a program whenever a gap is found.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

CORPUS = Path(__file__).parent / "corpus"
PROGRAMS = sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))
ASK_FOR_AN_ACCELERATOR = {"accelerator_idiom", "thread_pool_imports"}
"""Programs that move to ``torch.accelerator``'s device: on cpu there is none (the same run, compat on or off);
on xla cuda-compat names xla there by design (the move the user asked for), so they are cpu-only here."""


def run_twice(program: Path, device: str, extra_env: dict[str, str] | None = None) -> None:
    """Run ``program`` with cuda-compat off and on, on ``device``; fail unless the digests are equal."""
    digests = {}
    for compat in ("0", "1"):
        env = {**os.environ, "ANYDEVICE": device, "ANYDEVICE_CUDA_COMPAT": compat, "PYTHONHASHSEED": "0", **(extra_env or {})}
        env.pop("ANYDEVICE_CUDA_COMPAT_REPORT", None)
        done = subprocess.run(
            [sys.executable, str(program)], cwd=CORPUS, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        lines = done.stdout.strip().splitlines()
        assert done.returncode == 0 and lines, f"{program.name} (compat={compat}) failed:\n{done.stdout}\n{done.stderr[-3000:]}"
        if lines[-1].startswith("SKIP "):
            pytest.skip(lines[-1][5:])
        if compat == "1":
            assert "cuda-compat is active" in done.stderr, done.stderr[-2000:]
        digests[compat] = lines[-1]
    assert digests["1"] == digests["0"], f"{program.name}: cuda-compat changed what it computes"


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.stem)
def test_never_naming_cuda_computes_the_same_with_compat_on_cpu(program: Path) -> None:
    run_twice(program, "cpu")


@pytest.mark.xla
@pytest.mark.parametrize("program", [p for p in PROGRAMS if p.stem not in ASK_FOR_AN_ACCELERATOR], ids=lambda p: p.stem)
def test_never_naming_cuda_computes_the_same_with_compat_on_xla(program: Path) -> None:
    run_twice(program, "xla", {"PJRT_DEVICE": "CPU"})
