"""A rank's error file is written whole, and torch elastic's own reader parses it.

torch's ``@record`` wrote the file in place; a rank stopped mid-write (the launcher's SIGTERM once another rank had
failed) left an empty file, and the launcher failed parsing it (JSONDecodeError, core-torch2.15 lane) instead of
saying which rank failed. ``anydevice run``'s ranks write it through a temporary file and a rename.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from anydevice.cli.launch import _recorded

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md: torch elastic's reader of the error file


def _boom() -> None:
    raise RuntimeError("injected failure")


def test_a_failed_ranks_error_file_replaces_an_empty_one_and_torch_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    error_file = tmp_path / "error.json"
    error_file.write_text("")  # what a write cut short in place left behind
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    with pytest.raises(RuntimeError, match="injected failure"):
        _recorded(_boom)()
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(error_file))
    assert isinstance(failure.message, dict)  # torch's structured message, as @record's
    assert failure.message["message"] == "RuntimeError: injected failure" and failure.timestamp > 0
    assert "_boom" in failure.message["extraInfo"]["py_callstack"]
    assert not [p for p in tmp_path.iterdir() if p != error_file]  # no temporary file left beside it


def test_without_an_error_file_a_failure_only_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    with pytest.raises(RuntimeError, match="injected failure"):
        _recorded(_boom)()
