"""Measure each port: lines added and removed from the original script, for anydevice and for Accelerate.

    python examples/ports/count_lines.py      # prints the table docs/integrations.md shows

Counted with difflib over the real scripts in original/, anydevice/ and accelerate/ (blank lines and
comment-only lines are not counted; a changed line counts once as added and once as removed).
"""

from __future__ import annotations

import difflib
from pathlib import Path

HERE = Path(__file__).resolve().parent
PORTS = {
    "llama_loop": "Plain loop (tiny Llama, DDP-ready)",
    "trainer_llama": "Hugging Face Trainer",
    "diffusers_ddpm": "diffusers (UNet2DModel + DDPMPipeline, offload)",
}


def _code(path: Path) -> list[str]:
    lines = [line.rstrip() for line in path.read_text().splitlines()]
    return [line for line in lines if line.strip() and not line.strip().startswith("#")]


def changed(original: Path, port: Path) -> tuple[int, int]:
    """(added, removed) code lines between ``original`` and ``port``."""
    diff = list(difflib.unified_diff(_code(original), _code(port), lineterm="", n=0))
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    return added, removed


def table() -> str:
    """The Markdown table of lines changed per port."""
    rows = [
        "| port | original (code lines) | anydevice: added / removed | Accelerate: added / removed |",
        "|---|---|---|---|",
    ]
    for name, title in PORTS.items():
        original = HERE / "original" / f"{name}.py"
        ours, theirs = changed(original, HERE / "anydevice" / f"{name}.py"), changed(original, HERE / "accelerate" / f"{name}.py")
        rows.append(f"| {title} (`{name}.py`) | {len(_code(original))} | +{ours[0]} / -{ours[1]} | +{theirs[0]} / -{theirs[1]} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
