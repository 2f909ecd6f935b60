"""Helpers for tests: the repo's paths and real subprocess runs with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_PLUGINS = REPO / "tests" / "plugins"
TRAIN = REPO / "examples" / "train.py"
CLEARED = (
    "ANYDEVICE",
    "ANYDEVICE_PLUGINS",
    "ANYDEVICE_QUIET",
    "ANYDEVICE_DEBUG",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",  # an srun task in the test machine's own environment is not the one a test means
)


def child_env(extra: Mapping[str, str] | None = None, pythonpath: Path | None = None) -> dict[str, str]:
    """The environment of a child process: ours without selection variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def run(
    args: list[str], env: Mapping[str, str] | None = None, pythonpath: Path | None = None, timeout: float = 300, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run a real subprocess with this interpreter's environment."""
    return subprocess.run(args, env=child_env(env, pythonpath), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def python(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``python args...`` with the interpreter running the tests."""
    return run([sys.executable, *args], **kwargs)  # type: ignore[arg-type]


def anydevice_cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``python -m anydevice args...``."""
    return python("-m", "anydevice", *args, **kwargs)


TINY_LLAMA_AUTO = (
    "import sys\n"
    "from transformers import LlamaConfig, LlamaForCausalLM\n"
    "c = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)\n"
    "LlamaForCausalLM(c).save_pretrained(sys.argv[1])\n"
    "m = LlamaForCausalLM.from_pretrained(sys.argv[1], device_map='auto')\n"
    "print(sorted({str(p.device) for p in m.parameters()}))\n"
)
"""A script: save a random tiny Llama to argv[1], load it with ``device_map="auto"``, print where its parameters are."""
