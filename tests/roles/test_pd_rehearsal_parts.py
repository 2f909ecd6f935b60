"""``anydevice pd-rehearsal``'s parts in-process: its arguments, the preflight and refusal, readiness, completions.

vLLM, vllm-router and a KV connector are not installed in the main lane: the servers here are an in-process
HTTP server, and nothing stands in for the router (what the rehearsal reads from the real one is tested where
it is installed). The end-to-end rehearsal (real vLLM servers behind a real router) needs the serve lane's pieces
(tests/roles/test_pd_rehearsal.py runs it, or its refusal, through the CLI).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from anydevice.cli import pd_rehearsal
from anydevice.cli.pd_rehearsal import Piece
from anydevice.errors import UnsupportedFeatureError


class Server(ThreadingHTTPServer):
    requests: list[tuple[str, dict[str, str], Any]]


class Handler(BaseHTTPRequestHandler):
    """vLLM's OpenAI server as the rehearsal uses it: ``GET /health`` and ``POST /v1/completions``."""

    server: Server

    def do_GET(self) -> None:
        self.server.requests.append((self.path, dict(self.headers), None))
        self._reply(200 if self.path == "/health" else 404, b"")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        self._reply(200, json.dumps({"choices": [{"text": f" after {body['prompt']!r}"}]}).encode())

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    with Server(("127.0.0.1", 0), Handler) as httpd:
        httpd.requests = []
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        yield httpd
        httpd.shutdown()
        thread.join()


def children() -> set[int]:
    """The processes whose parent is this one (live or not yet reaped)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.add(int(entry.name))
    return found


# -- arguments -------------------------------------------------------------------------------------


def test_the_model_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        pd_rehearsal.main([])
    assert exited.value.code == 2
    assert "the following arguments are required: --model" in capsys.readouterr().err


def test_more_prompts_than_the_rehearsal_has_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        pd_rehearsal.main(["--model", "m", "--prompts", str(len(pd_rehearsal.PROMPTS) + 1)])
    assert exited.value.code == 2
    assert "argument --prompts: invalid choice: 6" in capsys.readouterr().err


# -- the preflight and the refusal -----------------------------------------------------------------


def test_a_router_that_cannot_run_is_taken_to_speak_the_known_connectors(tmp_path: Path) -> None:
    assert pd_rehearsal.router_connectors(None) == pd_rehearsal.ROUTER_CONNECTORS
    assert pd_rehearsal.router_connectors(str(tmp_path / "no-such-router")) == pd_rehearsal.ROUTER_CONNECTORS


def test_a_version_is_the_first_installed_distributions() -> None:
    assert pd_rehearsal._version("no-such-distribution", "numpy") == f"numpy {metadata.version('numpy')}"
    assert pd_rehearsal._version("no-such-distribution") is None


def test_the_refusal_names_every_missing_piece_and_only_those() -> None:
    pieces = [Piece("vLLM", True, "vllm 0.11"), Piece("vllm-router", False, "not here"), Piece("KV", False, "none")]
    with pytest.raises(UnsupportedFeatureError) as refused:
        pd_rehearsal.refuse(pieces)
    assert refused.value.message == "The P/D rehearsal cannot run here: vllm-router: not here; KV: none. Nothing was started."
    assert refused.value.hint is not None and "serve lane" in refused.value.hint
    pd_rehearsal.refuse(pieces[:1])  # every piece can run: no error


def test_check_prints_the_pieces_and_fails_while_one_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    pieces, connector = pd_rehearsal.preflight()
    if connector is not None and all(p.ok for p in pieces):
        pytest.skip("every piece can run here")
    assert pd_rehearsal.main(["--model", "m", "--check"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed == [{"name": p.name, "ok": p.ok, "why": p.why} for p in pieces]


def test_without_every_piece_main_refuses_before_starting_anything() -> None:
    pieces, connector = pd_rehearsal.preflight()
    if connector is not None and all(p.ok for p in pieces):
        pytest.skip("every piece can run here")
    before = children()
    with pytest.raises(UnsupportedFeatureError, match="Nothing was started"):
        pd_rehearsal.main(["--model", "m"])
    assert not children() - before  # nothing it started is left (other tests' children may end meanwhile)


# -- readiness and completions ---------------------------------------------------------------------


def test_a_free_port_can_be_bound() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", pd_rehearsal._free_port()))


def test_a_server_answering_health_is_ready(server: Server) -> None:
    running = subprocess.Popen(["sleep", "30"])
    try:
        pd_rehearsal._wait(f"http://127.0.0.1:{server.server_port}/health", running, 30)
    finally:
        running.kill()
        running.wait()
    assert [r[0] for r in server.requests] == ["/health"]


def test_a_server_that_exited_is_an_error_naming_its_status() -> None:
    exited = subprocess.Popen(["sh", "-c", "exit 3"])
    exited.wait()
    with pytest.raises(UnsupportedFeatureError, match=r"http://127.0.0.1:1/health: the server exited with 3 before"):
        pd_rehearsal._wait("http://127.0.0.1:1/health", exited, 30)


def test_a_server_not_ready_in_time_names_the_url_and_the_limit() -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()
    with pytest.raises(UnsupportedFeatureError, match=r"http://127.0.0.1:1/health was not ready after 0 s\.") as late:
        pd_rehearsal._wait("http://127.0.0.1:1/health", exited, 0)
    assert late.value.hint == "Raise --ready-timeout, or see the servers' logs."


def test_a_completion_is_asked_at_temperature_zero_and_its_text_returned(server: Server) -> None:
    text = pd_rehearsal._complete(f"http://127.0.0.1:{server.server_port}", "/models/tiny", "One, two,", 7)
    assert text == " after 'One, two,'"
    [(path, headers, body)] = server.requests
    assert path == "/v1/completions" and headers["Content-Type"] == "application/json"
    assert body == {"model": "/models/tiny", "prompt": "One, two,", "max_tokens": 7, "temperature": 0}


# -- the rehearsal's processes ---------------------------------------------------------------------


def open_paths() -> list[str]:
    """What this process's file descriptors point at (Linux's /proc)."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the descriptor listdir itself used, closed since
            pass
    return paths


def test_a_process_that_cannot_start_ends_every_one_started_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No vllm-router here: the three servers already started are ended, and every log file is closed."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no vllm-router on it
    if pd_rehearsal.router_path() is not None:
        pytest.skip("a vllm-router sits next to this Python: the serve lane's tests start it")
    logs = tmp_path / "logs"
    logs.mkdir()
    before = children()
    with warnings.catch_warnings(record=True) as caught, pytest.raises(FileNotFoundError, match="None"):
        warnings.simplefilter("always", ResourceWarning)
        pd_rehearsal.rehearse("/models/tiny", "nixl", pd_rehearsal.PROMPTS[:1], 4, 600, logs)
    # each log file is closed once its process has it (or failed to start): none left to the garbage collector
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not [path for path in open_paths() if path.startswith(str(logs))]
    assert sorted(p.name for p in logs.iterdir()) == ["decode.log", "prefill.log", "router.log", "single.log"]
    assert not children() - before
