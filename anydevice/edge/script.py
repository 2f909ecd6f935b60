"""The model to export from a script: its ``anydevice_export(checkpoint)`` hook returns ``(model, example_inputs)``.

Given a script, the hook is called with ``None``; given a checkpoint file (``ad.save``), the checkpoint is
loaded with ``ad.load`` and passed to the hook of ``script`` (``examples/train.py`` for the main job's
checkpoints). Used by ``anydevice export`` and by the matrix's export probe of the main job.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from anydevice.errors import ExportError

HOOK = "anydevice_export"


def load_model(source: Path, script: Path | None) -> tuple[Any, Any]:
    """``(model, example_inputs)`` from a script's hook, given the loaded checkpoint when ``source`` is one."""
    if not source.exists():
        raise ExportError(f"Cannot export {source}: no such file.")
    if source.is_dir():
        raise ExportError(
            f"Cannot export {source}: it is a directory (a sharded ad.checkpoint).",
            f"Load it into the model in a script and export from there: its {HOOK}(None) returns (model, example_inputs).",
        )
    if source.suffix == ".py":
        return _call_hook(source, None)
    if script is None:
        raise ExportError(
            f"{source} is a checkpoint: anydevice export needs the script that builds its model.",
            f"Pass --script PY, a file defining {HOOK}(checkpoint) -> (model, example_inputs) "
            "(examples/train.py for the main job's checkpoints).",
        )
    from anydevice import api as ad

    return _call_hook(script, ad.load(source))


def _call_hook(script: Path, checkpoint: Any) -> tuple[Any, Any]:
    hook = _load_hook(script)
    result = hook(checkpoint)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ExportError(f"{script}: {HOOK}() must return (model, example_inputs), got {type(result).__name__}.")
    return result[0], result[1]


def _load_hook(script: Path) -> Callable[[Any], Any]:
    if not script.is_file():
        raise ExportError(f"Cannot load {script}: no such file.")
    spec = importlib.util.spec_from_file_location(f"_anydevice_export_{script.stem}", script)
    if spec is None or spec.loader is None:
        raise ExportError(f"Cannot load {script} as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickles look their module up here
    spec.loader.exec_module(module)
    hook = getattr(module, HOOK, None)
    if not callable(hook):
        raise ExportError(
            f"{script} defines no {HOOK}().",
            f"Add def {HOOK}(checkpoint): ... return model, example_inputs (checkpoint is None for a script alone).",
        )
    return cast("Callable[[Any], Any]", hook)
