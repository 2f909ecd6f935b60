"""A test lane's time: its slowest tests (read from pytest's junit file), its budget and the per-test ceiling.

``scripts/test`` times each lane and hands the time to the lane record (``versions_table record --seconds``),
which keeps the wall time and the :data:`SLOWEST` slowest tests, then judges them here: a lane over its
budget fails, naming its time and slowest tests; a single test over the per-test ceiling fails unless it is
marked ``@pytest.mark.long("why")`` (tests/conftest.py writes the reason into the junit file as the
testcase property ``long``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SLOWEST = 15
"""How many of a lane's slowest tests its record keeps."""

LONG_PROPERTY = "long"
"""The junit testcase property that carries a ``@pytest.mark.long(reason)`` test's reason."""


@dataclass(frozen=True)
class CaseTime:
    """One test's time in a lane (pytest's setup, call and teardown together, as junit counts it)."""

    test: str
    """The pytest node id when the module file is found (``tests/core/test_cli.py::test_x``), else junit's names."""
    seconds: float
    long: str = ""
    """The reason when the test is marked ``long``; empty otherwise."""


def node_id(classname: str, name: str, root: Path | None = None) -> str:
    """junit's ``tests.core.test_cli.TestX`` + ``test_y`` -> ``tests/core/test_cli.py::TestX::test_y`` (the module is the
    longest prefix that is a file under ``root``, default the working directory)."""
    parts = classname.split(".") if classname else []
    base = root or Path.cwd()
    for cut in range(len(parts), 0, -1):
        if (base / Path(*parts[:cut])).with_suffix(".py").is_file():
            return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])
    return "::".join([*filter(None, [classname]), name])


def junit_times(path: Path, root: Path | None = None) -> list[CaseTime]:
    """Every test case's time in pytest's ``--junitxml`` file (empty when the file is missing or unreadable)."""
    try:
        tree = ElementTree.parse(path)
    except (OSError, ElementTree.ParseError):
        return []
    times = []
    for case in tree.getroot().iter("testcase"):
        props = {p.get("name"): p.get("value", "") for p in case.iter("property")}
        try:
            seconds = float(case.get("time", 0) or 0)
        except ValueError:
            seconds = 0.0
        test = node_id(case.get("classname", ""), case.get("name", ""), root)
        times.append(CaseTime(test, seconds, props.get(LONG_PROPERTY) or ""))
    return times


def slowest(times: Iterable[CaseTime], count: int = SLOWEST) -> list[dict[str, object]]:
    """The ``count`` slowest tests, slowest first, as the record stores them: ``{"test", "seconds"[, "long"]}``."""
    ranked = sorted(times, key=lambda t: (-t.seconds, t.test))[:count]
    return [{"test": t.test, "seconds": round(t.seconds, 2), **({"long": t.long} if t.long else {})} for t in ranked]


def _named(tests: Sequence[Mapping[str, object]], count: int = 5) -> str:
    return "; ".join(f"{t['test']} {float(str(t['seconds'])):.1f} s" for t in tests[:count]) or "no test times (no junit file)"


def over_budget(lane: str, seconds: float, budget: float | None, tests: Sequence[Mapping[str, object]]) -> str | None:
    """Why the lane fails its budget (its time and slowest ``tests``), or None when it is within it or has none."""
    if budget is None or seconds <= budget:
        return None
    return f"lane {lane} took {seconds:.0f} s, over its budget of {budget:.0f} s; slowest: {_named(tests)}"


def over_ceiling(times: Iterable[CaseTime], ceiling: float | None) -> list[str]:
    """One line per test over the per-test ``ceiling`` that is not marked ``long`` (slowest first)."""
    if ceiling is None:
        return []
    over = sorted((t for t in times if t.seconds > ceiling and not t.long), key=lambda t: -t.seconds)
    return [
        f"{t.test} took {t.seconds:.1f} s, over the per-test ceiling of {ceiling:.0f} s: make it faster "
        f'or mark it @pytest.mark.long("why it takes this long")'
        for t in over
    ]


def minutes(seconds: float) -> str:
    """``1230`` -> ``20.5 min``; under two minutes in seconds."""
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def table_row(record: Mapping[str, object]) -> str:
    """One line of ``scripts/test``'s closing table: lane, outcome, tests, time against budget, slowest test."""
    counts = record.get("counts") or {}
    ran = sum(int(v) for k, v in counts.items() if k != "skipped") if isinstance(counts, Mapping) else 0
    seconds = float(str(record.get("seconds") or 0))
    budget = record.get("budget")
    tests = record.get("slowest") or []
    top = _named(tests, 1) if isinstance(tests, Sequence) and tests else "-"
    limit = f"{minutes(float(str(budget)))}" if budget else "-"
    return f"{record.get('lane', '?')!s:<15} {record.get('outcome', '?')!s:<8} {ran:>5} {minutes(seconds):>9} {limit:>9}  {top}"


TABLE_HEAD = f"{'lane':<15} {'outcome':<8} {'tests':>5} {'time':>9} {'budget':>9}  slowest test"
"""The closing table's header line (:func:`table_row` lines follow it)."""
