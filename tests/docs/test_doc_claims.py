"""What docs/plugins.md and the README state about the contract's fields and defaults is checked against the code.

A doc claim that drifts fails here: the knob table (every optional knob and its default), the defaults the
prose states (`knob=value` next to the word "default"), the required fields, and the README's plugin table.
Each check is a function returning its problems, so the planted wrong defaults below show it fails.
"""

from __future__ import annotations

import dataclasses
import re

from anydevice.contract.device_spec import DEFAULT_PRIORITY, DeviceSpec
from anydevice.runtime.registry import builtin_registry
from tests.docs.contract_table import knobs, table
from tests.utils import REPO

PLUGINS_DOC = REPO / "docs" / "plugins.md"
README = REPO / "README.md"
KNOB_TABLE = re.compile(r"<!-- knobs: begin -->\n(?P<table>.*?)\n<!-- knobs: end -->", re.S)
STATED_DEFAULT = re.compile(
    r"default[^.`]{0,60}`(?P<knob>[a-z_]+)=(?P<value>[^`]+)`|`(?P<knob2>[a-z_]+)=(?P<value2>[^`]+)`[^.`]{0,20}default"
)
PLUGIN_TABLE = re.compile(r"^\| plugin \| device \| compile backend \|.*?\n\|---.*?\n(?P<rows>(?:\|.*\n)+)", re.M)


def knob_table_problems(doc: str) -> list[str]:
    """The page's knob table against the code's, one problem per row that differs."""
    found = KNOB_TABLE.search(doc)
    if found is None:
        return ["docs/plugins.md has no knob table (<!-- knobs: begin --> ... <!-- knobs: end -->)"]
    page, code = found.group("table").splitlines(), table().splitlines()
    problems = [f"the page says {row!r}, not in the code" for row in page if row not in code]
    return problems + [f"the code has {row!r}, not on the page" for row in code if row not in page]


def stated_default_problems(doc: str) -> list[str]:
    """Each ``knob=value`` the prose calls a default, against the code's default for that knob name."""
    defaults: dict[str, set[str]] = {}
    for _section, knob, default in knobs():
        defaults.setdefault(knob, set()).add(default)
    problems = []
    for m in STATED_DEFAULT.finditer(KNOB_TABLE.sub("", doc)):
        knob, value = m.group("knob") or m.group("knob2"), (m.group("value") or m.group("value2")).strip()
        if knob in defaults and value not in defaults[knob]:
            problems.append(f"the page gives {knob}={value} as a default; the code's is {' or '.join(sorted(defaults[knob]))}")
    return problems


def required_fields_problems(doc: str) -> list[str]:
    """ "`DeviceSpec` needs `name`, `detect` and `load`" against the fields without a default."""
    required = [
        f.name
        for f in dataclasses.fields(DeviceSpec)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    claim = "`DeviceSpec` needs " + ", ".join(f"`{n}`" for n in required[:-1]) + f" and `{required[-1]}`"
    return [] if claim in doc else [f"docs/plugins.md does not say {claim!r}"]


def readme_plugin_table_problems(readme: str) -> list[str]:
    """The README's plugin table (priority, compile backends, process group, evidence) against each built-in declaration."""
    registry, problems = builtin_registry(), []
    found = PLUGIN_TABLE.search(readme)
    if found is None:
        return ["README has no plugin table (| plugin | device | compile backend | ...)"]
    rows = {row.split("|")[1].split()[0]: row for row in found.group("rows").splitlines()}
    for name in registry.names():
        spec = registry.get(name).spec
        if name not in rows:
            problems.append(f"README's plugin table has no row for {name}")
            continue
        cells = [c.strip() for c in rows[name].strip("|").split("|")]
        if not cells[5].startswith(str(spec.priority)):
            problems.append(f"README gives {name} priority {cells[5]!r}; the plugin declares {spec.priority}")
        compile_backends = {b.strip() for b in cells[2].split("/")}
        if not compile_backends <= set(spec.check.compile_backends):
            problems.append(f"README gives {name} compile backends {cells[2]!r}; CheckFacts says {spec.check.compile_backends}")
        if spec.check.dist_backend is not None and spec.check.dist_backend not in cells[3]:
            problems.append(f"README gives {name} process group {cells[3]!r}; CheckFacts says {spec.check.dist_backend!r}")
        if not cells[6].startswith(spec.evidence.words):
            problems.append(f"README gives {name} evidence {cells[6]!r}; the plugin declares {spec.evidence.words!r}")
    return problems


def test_the_knob_table_is_the_code() -> None:
    assert knob_table_problems(PLUGINS_DOC.read_text()) == [], "regenerate with: python -m tests.docs.contract_table"


def test_defaults_the_prose_states_are_the_code() -> None:
    doc = PLUGINS_DOC.read_text()
    assert stated_default_problems(doc) == []
    assert f"`DEFAULT_PRIORITY` ({DEFAULT_PRIORITY})" in doc
    assert required_fields_problems(doc) == []


def test_the_readme_plugin_table_is_the_plugins() -> None:
    assert readme_plugin_table_problems(README.read_text()) == []


def test_a_planted_wrong_default_fails() -> None:
    doc = PLUGINS_DOC.read_text()
    planted_row = doc.replace(
        "| `PlacementTable` | `pinned_memory` | `True` |", "| `PlacementTable` | `pinned_memory` | `False` |"
    )
    assert planted_row != doc
    assert knob_table_problems(planted_row) == [
        "the page says '| `PlacementTable` | `pinned_memory` | `False` |', not in the code",
        "the code has '| `PlacementTable` | `pinned_memory` | `True` |', not on the page",
    ]
    planted_prose = doc + "\nThe default is `pinned_memory=False`.\n"  # the 0.4 page's kind of drift (verified_on_hardware)
    assert stated_default_problems(planted_prose) == ["the page gives pinned_memory=False as a default; the code's is True"]
    readme = README.read_text()
    planted_readme = readme.replace(
        "| cpu | `cpu` | inductor | gloo | torchrun | 0 |", "| cpu | `cpu` | inductor | nccl | torchrun | 5 |"
    )
    assert len(readme_plugin_table_problems(planted_readme)) == 2
    planted_evidence = readme.replace("| 80 | declared, not run |", "| 80 | ran on the chip |")
    assert readme_plugin_table_problems(planted_evidence) == [
        "README gives cuda evidence 'ran on the chip'; the plugin declares 'declared, not run'"
    ]


def test_the_changelog_lists_every_removed_keyword() -> None:
    from anydevice.contract.device_spec import REMOVED_KEYWORDS
    from anydevice.shims.eager import REMOVED_FLAT_KEYWORDS

    changelog = (REPO / "CHANGELOG.md").read_text()
    missing = [f"{k}=" for k in (*REMOVED_KEYWORDS, *REMOVED_FLAT_KEYWORDS) if f"`{k}=" not in changelog]
    assert not missing, missing
    assert "anydevice/old_paths.py" in changelog and "`anydevice.registry`" in changelog  # the retired 0.3 paths
