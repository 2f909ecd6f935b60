"""The plugin contract's optional surface, read from the code: every knob with its default (docs/plugins.md's table).

``python -m tests.docs.contract_table`` prints the table; tests/docs/test_doc_claims.py holds the page to it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from typing import Any

from anydevice.contract.check_facts import CheckFacts, OpTable
from anydevice.contract.device_spec import DeviceSpec, Hardware, Launch, Serving
from anydevice.shims import contracts
from anydevice.shims.eager import CollectivesTable, CompileTable, EagerVendor, PlacementTable, ProfilingTable
from anydevice.shims.lazy_xla import XlaVendor

SECTIONS: tuple[type, ...] = (
    DeviceSpec,
    Hardware,
    Launch,
    Serving,
    CheckFacts,
    OpTable,
    PlacementTable,
    CompileTable,
    CollectivesTable,
    ProfilingTable,
    XlaVendor,
)
"""The declaration dataclasses a plugin fills in; every field with a default is one knob."""
SHIMS: tuple[type, ...] = (contracts.Placement, contracts.Compilation, contracts.Collectives, contracts.Profiling)
"""The shim base classes: every public member defined on them is a knob a subclass may override."""
HOOKS: tuple[str, ...] = ("anydevice_register_probes", "anydevice_doctor_checks")
"""The optional hooks (``anydevice_register_devices`` is required)."""


def default_text(value: Any) -> str:
    """A default as the table writes it: its repr, ``function`` for callables, ``Evidence()`` spelled as its class."""
    if inspect.isfunction(value) or inspect.ismethod(value):
        return "function"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = [f for f in dataclasses.fields(value) if getattr(value, f.name) != _field_default(f)]
        return f"{type(value).__name__}()" if not changed else repr(value)
    if isinstance(value, frozenset):
        return "frozenset()" if not value else "{" + ", ".join(repr(v) for v in sorted(value)) + "}"
    return repr(value)


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def knobs() -> Iterator[tuple[str, str, str]]:
    """``(section, knob, default)`` for every optional knob of the contract, in a stable order."""
    for cls in SECTIONS:
        for f in dataclasses.fields(cls):
            value = _field_default(f)
            if value is not dataclasses.MISSING:
                yield cls.__name__, f.name, default_text(value)
    for f in dataclasses.fields(EagerVendor):  # its sections are counted by their fields, above
        if f.name not in ("device_type", "placement", "compile", "collectives", "profiling"):
            yield "EagerVendor", f.name, default_text(_field_default(f))
    for cls in SHIMS:
        for name, value in vars(cls).items():
            if name.startswith("_") or name == "device_type":
                continue
            yield cls.__name__, name, "method" if callable(value) or isinstance(value, property) else default_text(value)
    for hook in HOOKS:
        yield "hooks", hook, "none"


def table() -> str:
    """docs/plugins.md's knob table, as Markdown."""
    rows = ["| section | knob | default |", "|---|---|---|"]
    rows += [f"| `{section}` | `{knob}` | `{default}` |" for section, knob, default in knobs()]
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
