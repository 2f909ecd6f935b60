"""The ported example scripts: the lines-changed table in docs/integrations.md is what count_lines.py measures."""

from __future__ import annotations

import importlib.util
import re

from tests.utils import REPO

PORTS = REPO / "examples" / "ports"


def _count_lines():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("count_lines", PORTS / "count_lines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_port_has_its_original_and_both_ports():
    for name in _count_lines().PORTS:
        for kind in ("original", "anydevice", "accelerate"):
            assert (PORTS / kind / f"{name}.py").is_file(), f"{kind}/{name}.py"


def test_docs_table_is_the_measured_one():
    docs = (REPO / "docs" / "integrations.md").read_text()
    found = re.search(r"<!-- ports-table:start -->\n(.*?)\n<!-- ports-table:end -->", docs, re.S)
    assert found, "docs/integrations.md lost its ports table markers"
    assert found.group(1) == _count_lines().table(), "re-run `python examples/ports/count_lines.py` and paste the table"


def test_a_port_counts_its_changed_lines(tmp_path):
    original, port = tmp_path / "a.py", tmp_path / "b.py"
    original.write_text("import torch\n\nx = torch.ones(2).cuda()  # c\n")
    port.write_text("import torch\nimport anydevice as ad\n# a comment\nx = ad.to(torch.ones(2))  # c\n")
    assert _count_lines().changed(original, port) == (2, 1)
