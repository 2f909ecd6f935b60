"""How much one result file may put on the matrix page, and how much the page holds in all.

The schema bounds a result's own texts (a log, of which the page shows the tail; a message; a reason), and they are
cut further here to what real results hold (:data:`MAX_TEXT`); what it leaves open (the number of results,
params and fallback ops per result, the environment's package lists, the command line, identity strings) is cut
here, once, when the file is loaded, and every cut is named in the page's problems ("FILE: cut to fit the page:
..."). A run's environment line and a result's params are repeated in every cell of the run, so a hostile file
could otherwise grow the page to hundreds of megabytes (116 MB was seen) from one 64 MB file.
"""

from __future__ import annotations

import html
from typing import Any, Final, TypeVar

from anydevice.compat_matrix.schema import ProbeResult, Run

MAX_RESULTS_PER_RUN: Final = 500
"""Probe results one file may put on the page (the catalogue has under 100 probes)."""

MAX_RESULTS_ON_PAGE: Final = 2000
"""Probe results the page holds from every file together; files past it are skipped, named."""

MAX_PAGE_WEIGHT: Final = 24 << 20
"""The page's size budget: what every file's :func:`page_weight` adds up to at most; files past it are skipped, named."""

MAX_ENTRIES: Final = 16
"""Params, fallback ops, packages and runtimes kept per result or run."""

MAX_SHORT: Final = 100
"""Characters kept of a param, an op name, a package name or version, an identity field."""

MAX_COMMAND: Final = 1000
"""Characters kept of the run's command line (and of each of its argv items)."""

MAX_TEXT: Final = 500
"""Characters kept of a result's reason, message and description (the schema allows more; real ones are shorter)."""

T = TypeVar("T")


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters, then ``… (N more)`` when it was longer."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more)"


def _cut_or_none(text: str | None, limit: int = MAX_SHORT) -> str | None:
    return None if text is None else cut(text, limit)


def _first(items: list[T], limit: int = MAX_ENTRIES) -> list[T]:
    return items[:limit]


def _short_map(mapping: dict[str, Any]) -> dict[str, Any]:
    """The first :data:`MAX_ENTRIES` entries, keys and string values cut to :data:`MAX_SHORT`."""
    return {
        cut(key, MAX_SHORT): cut(value, MAX_SHORT) if isinstance(value, str) else value
        for key, value in list(mapping.items())[:MAX_ENTRIES]
    }


def page_weight(run: Run) -> int:
    """About how many characters ``run`` puts on the page: its JSON as HTML escapes it, and its environment once per
    result (every cell of the run repeats it). The page renders less (logs are excerpts), never much more."""
    escaped = html.escape(run.model_dump_json())
    environment = html.escape(run.env.model_dump_json() + run.plugin.model_dump_json() + run.anydevice.model_dump_json())
    return len(escaped) + len(run.results) * len(environment)


def bound_run(run: Run) -> tuple[Run, list[str]]:
    """``run`` cut to what one file may put on the page, and what was cut, in words (empty when nothing was)."""
    cuts: list[str] = []
    results = run.results
    if len(results) > MAX_RESULTS_PER_RUN:
        cuts.append(f"{len(results)} probe results (the first {MAX_RESULTS_PER_RUN} kept)")
        results = results[:MAX_RESULTS_PER_RUN]
    bounded = [_bound_result(result) for result in results]
    changed = sum(new is not old for new, old in zip(bounded, results))
    if changed:
        cuts.append(
            f"{changed} result(s) (reasons, messages and descriptions to {MAX_TEXT} characters, params and fallback ops "
            f"to {MAX_ENTRIES} of {MAX_SHORT} characters)"
        )
    env, invocation, hardware = run.env, run.invocation, run.hardware
    new_env = env.model_copy(
        update={
            "python": cut(env.python, MAX_SHORT),
            "torch": _cut_or_none(env.torch),
            "os": cut(env.os, MAX_SHORT),
            "runtimes": _short_map(env.runtimes),
            "packages": _short_map(env.packages),
        }
    )
    new_invocation = invocation.model_copy(
        update={
            "argv": [cut(item, MAX_COMMAND) for item in _first(invocation.argv, 64)],
            "ANYDEVICE": _cut_or_none(invocation.ANYDEVICE),
            "command": cut(invocation.command, MAX_COMMAND),
        }
    )
    new_hardware = hardware.model_copy(
        update={
            "device_type": cut(hardware.device_type, MAX_SHORT),
            "chip": _cut_or_none(hardware.chip),
            "evidence": None if hardware.evidence is None else _short_map(hardware.evidence),
        }
    )
    plugin = run.plugin
    new_plugin = plugin.model_copy(
        update={name: _cut_or_none(getattr(plugin, name)) for name in ("version", "vendor_package", "vendor_version")}
        | {"name": cut(plugin.name, MAX_SHORT)}
    )
    new_anydevice = run.anydevice.model_copy(
        update={"version": cut(run.anydevice.version, MAX_SHORT), "git_sha": _cut_or_none(run.anydevice.git_sha)}
    )
    around = (new_env, new_invocation, new_hardware, new_plugin, new_anydevice)
    if any(new != old for new, old in zip(around, (env, invocation, hardware, plugin, run.anydevice))):
        cuts.append(f"its environment, command or identity (lists to {MAX_ENTRIES} entries, texts to {MAX_SHORT} characters)")
    if not cuts:
        return run, []
    update = {"results": bounded, "env": new_env, "invocation": new_invocation, "hardware": new_hardware}
    return run.model_copy(update=update | {"plugin": new_plugin, "anydevice": new_anydevice}), cuts


def _bound_result(result: ProbeResult) -> ProbeResult:
    """``result`` with its texts cut and at most :data:`MAX_ENTRIES` params and fallback ops; the same object when
    nothing needed cutting."""
    update: dict[str, Any] = {
        "params": _short_map(result.params),
        "fallback_ops": [cut(op, MAX_SHORT) for op in _first(result.fallback_ops)],
        "reason": _cut_or_none(result.reason, MAX_TEXT),
        "message": _cut_or_none(result.message, MAX_TEXT),
        "description": cut(result.description, MAX_TEXT),
    }
    if all(update[name] == getattr(result, name) for name in update):
        return result
    return result.model_copy(update=update)
