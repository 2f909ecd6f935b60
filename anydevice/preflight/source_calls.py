"""The ``torch.*`` calls a script's own source makes, by name and first line, read without running it.

``anydevice check`` runs only a script's first steps; what comes after (validation under
``torch.inference_mode()``, sampling with ``torch.Generator(device=...)``) is found here, so a target whose
runtime refuses such a call (``CheckFacts.refused_calls``) is told before the run, at the user's line.
Names are resolved through the script's imports (``import torch as t``, ``from torch import inference_mode``);
a decorator without a call (``@torch.inference_mode``) counts as a call.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = "torch"


def calls_in(script: Path) -> dict[str, str]:
    """``{"torch.inference_mode": "train.py:42", "torch.Generator(device=)": "train.py:57", ...}`` (first line each);
    empty when the source cannot be read or parsed."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    aliases = _aliases(tree)
    first: dict[str, int] = {}

    def note(name: str | None, line: int) -> None:
        if name is not None and name.split(".")[0] == ROOT and line < first.get(name, line + 1):
            first[name] = line

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func, aliases)
            note(name, node.lineno)
            if name is not None and any(k.arg == "device" for k in node.keywords):
                note(f"{name}(device=)", node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if not isinstance(decorator, ast.Call):
                    note(_dotted(decorator, aliases), decorator.lineno)
    return {name: f"{script}:{line}" for name, line in sorted(first.items())}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from every import in the file."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])
