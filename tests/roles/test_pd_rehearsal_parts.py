"""``anydevice pd-rehearsal``'s parts in-process: its arguments, the preflight and refusal, readiness, completions.

vLLM, vllm-router and a KV connector are not installed in the main lane: the router here is a shell
script printing vllm-router 0.1.17's real ``--help`` text, the servers an in-process HTTP server. The
end-to-end rehearsal (real vLLM servers behind a real router) needs the serve lane's pieces
(tests/roles/test_pd_rehearsal.py runs it, or its refusal, through the CLI).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
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

ROUTER_HELP = """\
usage: vllm-router [-h] [--host HOST] [--port PORT] [--worker-urls [WORKER_URLS ...]]
                   [--vllm-pd-disaggregation] [--prefill PREFILL [PREFILL ...]] [--decode URL]
                   [--vllm-discovery-address VLLM_DISCOVERY_ADDRESS]
                   [--kv-connector {nixl,mooncake,moriio}] [--prometheus-port PROMETHEUS_PORT]
  --kv-connector {nixl,mooncake,moriio}
                        KV connector type for PD disaggregation. 'nixl' (default) uses NIXL's
                        pull-based KV transfer; 'mooncake' uses Mooncake's push-based protocol
                        (queries each prefill node's bootstrap server for engine_id per DP rank);
                        'moriio' uses the MoRI-IO connector (either READ or WRITE modes).
                        (default: nixl)
"""
"""Lines of ``COLUMNS=100 vllm-router --help`` from vllm-router 0.1.17 (the PyPI wheel, run in a scratch venv)."""


@pytest.fixture
def router_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``vllm-router`` on PATH that prints the real router's help and otherwise waits to be ended."""
    if Path(sys.executable).with_name("vllm-router").exists():
        pytest.skip("a real vllm-router sits next to this Python: the serve lane's tests use it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    router = bin_dir / "vllm-router"
    router.write_text(f"#!/bin/sh\nif [ \"$1\" = --help ]; then cat <<'EOF'\n{ROUTER_HELP}EOF\nexit 0\nfi\nexec sleep 60\n")
    router.chmod(router.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return str(router)


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


def test_the_routers_connectors_are_its_kv_connector_choices(router_on_path: str) -> None:
    assert pd_rehearsal.router_path() == router_on_path
    assert pd_rehearsal.router_connectors(router_on_path) == ("nixl", "mooncake", "moriio")


def test_a_version_is_the_first_installed_distributions() -> None:
    assert pd_rehearsal._version("no-such-distribution", "numpy") == f"numpy {metadata.version('numpy')}"
    assert pd_rehearsal._version("no-such-distribution") is None


def test_the_preflight_finds_the_router_and_says_why_no_connector_can_run(router_on_path: str) -> None:
    pieces, connector = pd_rehearsal.preflight()
    assert [p.name for p in pieces] == ["vLLM", "vllm-router", "KV connector on CPU"]
    assert pieces[1] == Piece("vllm-router", True, router_on_path)
    if connector is not None:
        pytest.skip(f"{connector}'s package is installed here")
    assert pieces[2] == Piece(
        "KV connector on CPU",
        False,
        "none: vllm-router's P/D mode speaks only nixl, mooncake, moriio (--kv-connector), and none of their packages "
        "(nixl, mooncake, mori) is installed here; vLLM's CPU-only ExampleConnector is not one the router speaks, "
        "and the nixl wheels are CUDA builds, untested on CPU",
    )


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
    assert children() == before


# -- readiness and completions ---------------------------------------------------------------------


def test_a_free_port_can_be_bound() -> None:
    port = pd_rehearsal._free_port()
    assert 0 < port < 65536


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


def test_servers_not_ready_in_time_end_every_process_the_rehearsal_started(router_on_path: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    before = children()
    with (
        warnings.catch_warnings(record=True) as caught,
        pytest.raises(UnsupportedFeatureError, match=r"^http://127\.0\.0\.1:\d+/health was not ready after 0 s\.\n"),
    ):
        warnings.simplefilter("always", ResourceWarning)
        pd_rehearsal.rehearse("/models/tiny", "nixl", pd_rehearsal.PROMPTS[:1], 4, 0, logs)
    # each log file is closed once its server has it: none left to the garbage collector, none open here
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not [path for path in open_paths() if path.startswith(str(logs))]
    assert sorted(p.name for p in logs.iterdir()) == ["decode.log", "prefill.log", "router.log", "single.log"]
    assert children() == before
