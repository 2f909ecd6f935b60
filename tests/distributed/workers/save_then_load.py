"""Every rank calls ``ad.save`` then ``ad.load`` on one shared path, ROUNDS times; prints one JSON line per rank.

Before ad.save waited for the main rank's file, rank 1 loaded a missing or older file in most runs.
"""

import json
import sys

import torch

import anydevice as ad


def main(directory: str, rounds: int) -> None:
    ad.distributed.init(timeout_s=60)
    rank, ok = ad.distributed.rank(), 0
    path = f"{directory}/shared.pt"
    for i in range(rounds):
        ad.save({"round": i, "weights": torch.full((256, 256), float(i))}, path)
        state = ad.load(path)
        ok += int(state["round"] == i and bool((state["weights"] == i).all()))
        ad.distributed.barrier()  # nobody overwrites the file before every rank read this round's
    print(json.dumps({"rank": rank, "rounds": rounds, "ok": ok}), flush=True)
    ad.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
