"""``anydevice pd-rehearsal`` refuses, naming each piece and why, where a piece cannot run (this machine: no vLLM here,
and no KV connector both vLLM on CPU and vllm-router speak); nothing is started then."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from anydevice.cli import pd_rehearsal
from tests.utils import REPO, child_env


def test_the_refusal_names_each_missing_piece_and_starts_nothing() -> None:
    pieces, connector = pd_rehearsal.preflight()
    if connector is not None and all(p.ok for p in pieces):
        pytest.skip("every piece can run here: the rehearsal itself is the test")
    done = subprocess.run(
        [sys.executable, "-m", "anydevice", "pd-rehearsal", "--model", "unused"],
        capture_output=True,
        text=True,
        env=child_env({"ANYDEVICE_QUIET": "1"}),
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "The P/D rehearsal cannot run here:" in done.stderr and "Nothing was started." in done.stderr
    for piece in pieces:
        assert (f"{piece.name}: {piece.why}" in done.stderr) == (not piece.ok)


def test_check_lists_the_pieces() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "anydevice", "pd-rehearsal", "--model", "unused", "--check"],
        capture_output=True,
        text=True,
        env=child_env({"ANYDEVICE_QUIET": "1"}),
        timeout=120,
        cwd=REPO,
    )
    names = [p["name"] for p in json.loads(done.stdout)]
    assert names == ["vLLM", "vllm-router", "KV connector on CPU"]


def test_the_router_connectors_come_from_its_help() -> None:
    router = pd_rehearsal.router_path()
    if router is None:
        pytest.skip("vllm-router is not installed here")
    assert "nixl" in pd_rehearsal.router_connectors(router)
