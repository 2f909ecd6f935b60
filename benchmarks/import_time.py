"""How much ``import anydevice`` adds to ``import torch``, and what peers add (one run, same machine).

    python benchmarks/import_time.py [--repeat 7]

Each measurement is a fresh interpreter; the table gives medians in seconds. Peers are measured
only if installed (accelerate, lightning). Prints a JSON line last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys

CASES = {
    "python": "pass",
    "torch": "import torch",
    "anydevice": "import anydevice",
    "torch+anydevice": "import torch, anydevice",
    "torch+anydevice+device()": "import torch, anydevice; anydevice.device()",
    "torch+accelerate": "import torch, accelerate",
    "torch+lightning.fabric": "import torch, lightning.fabric",
}


def measure(code: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", f"import time; t=time.perf_counter(); {code}; print(time.perf_counter()-t)"],
            capture_output=True,
            text=True,
            check=True,
            env={"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", "PATH": ""},
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    results = {}
    for name, code in CASES.items():
        module = code.split()[-1].split(".")[0].rstrip(";")
        if ("accelerate" in code or "lightning" in code) and importlib.util.find_spec(module) is None:
            continue
        results[name] = measure(code, args.repeat)
        print(f"{name:<28} {results[name]:.3f} s")
    added = results["torch+anydevice"] - results["torch"]
    print(f"anydevice adds {added:+.3f} s to import torch")
    print(json.dumps({"median_s": results, "anydevice_adds_s": added}))


if __name__ == "__main__":
    main()
