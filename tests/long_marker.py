"""``@pytest.mark.long("why")``: a test allowed past the per-test ceiling, with its reason in the junit file.

Loaded by tests/conftest.py (and by ``-p tests.long_marker`` where a lane has no conftest). The reason
goes into the junit file as the testcase property ``long``, where ``scripts/test``'s record step
(anydevice.compat_matrix.lane_time) reads it: a test over the ceiling without one fails its lane.
"""

from __future__ import annotations

import pytest

MARKER = "long(reason): allowed past scripts/test's per-test ceiling; the reason says why it takes that long"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Copy each ``long`` test's reason into its junit properties; a ``long`` mark without a reason is an error."""
    for item in items:
        mark = item.get_closest_marker("long")
        if mark is None:
            continue
        reason = mark.args[0] if mark.args else mark.kwargs.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise pytest.UsageError(f'{item.nodeid}: @pytest.mark.long needs its reason: @pytest.mark.long("launches 4 ranks")')
        item.user_properties.append(("long", reason.strip()))
