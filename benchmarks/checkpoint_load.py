"""What ``ad.load``'s integrity check costs: ``ad.load`` (CRC-32 of every member, then ``torch.load``) against ``torch.load``.

    python benchmarks/checkpoint_load.py [--megabytes 100] [--rounds 7] [--out PATH]

One checkpoint of ``--megabytes`` of float32 tensors (a dict of 8 equal tensors and a step) is
written with ``ad.save``; then, in rotated rounds (benchmarks/rotate.py), it is loaded with
``torch.load(weights_only=True)``, with ``ad.load``, and the CRC pass alone (``verify_archive``) is
timed. The file is in the page cache after the first round, so the numbers are the CPU cost of the
check, not disk reads. Writes benchmarks/results/checkpoint_load.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate


def timed(action: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    import anydevice as ad
    from anydevice.checkpoint.loading import verify_archive

    numel = int(args.megabytes * 1e6 / 4 / 8)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt.pt"
        ad.save({"step": 1, **{f"w{i}": torch.randn(numel) for i in range(8)}}, path)
        size = path.stat().st_size
        variants = {
            "torch.load": timed(lambda: torch.load(path, weights_only=True)),
            "ad.load": timed(lambda: ad.load(path)),
            "CRC-32 check alone": timed(lambda: verify_archive(path)),
        }
        samples = rotate.rotate(variants, args.rounds, discard=1)
    result = {
        "benchmark": "checkpoint_load",
        "machine": rotate.machine(),
        "file_bytes": size,
        "rounds": args.rounds,
        "seconds": {name: rotate.spread(values) for name, values in samples.items()},
        "ratio_to_torch_load": rotate.ratios(samples, "torch.load"),
    }
    rotate.write("checkpoint_load", result, args.out)


if __name__ == "__main__":
    main()
