"""A three-stage Ray pipeline on a local cluster, a device per stage: Ray Data map (cpu), TorchTrainer (toy), actor pool (cpu).

Usage: ray_stages.py OUT_DIR (the toy device's plugin on PYTHONPATH). The toy device stands in for an
accelerator: its plugin declares the custom Ray resource ``toy_chip``, of which the cluster has one.
Prints one JSON line: what each stage's workers selected.
"""

import json
import os
import sys
import time
from pathlib import Path

import ray
from ray.train import RunConfig
from ray.util.actor_pool import ActorPool

from anydevice.integrations.ray import stage, trainer


def selected() -> dict[str, str]:
    import anydevice as ad

    return {"device": ad.backend().name, "ANYDEVICE": os.environ["ANYDEVICE"], "torch_device": str(ad.device())}


def preprocess(batch: dict) -> dict:
    seen = selected()
    return {**batch, **{k: [v] * len(batch["id"]) for k, v in seen.items()}}


def train_loop(config: dict) -> None:
    import anydevice as ad

    ad.distributed.init()  # adopts Ray's group
    Path(config["out"], "train.json").write_text(json.dumps({**selected(), "world_size": ad.distributed.world_size()}))


class Inference:
    def report(self, i: int) -> dict[str, str]:
        return {**selected(), "item": str(i)}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    started = time.perf_counter()
    seconds: dict[str, float] = {}

    def lap(phase: str) -> None:
        seconds[phase] = round(time.perf_counter() - started - sum(seconds.values()), 1)
        print(f"[ray_stages] {phase} {seconds[phase]} s", file=sys.stderr, flush=True)

    ray.init(
        address="local",
        include_dashboard=False,
        num_cpus=3,
        resources={"toy_chip": 1},
        _node_ip_address="127.0.0.1",
        configure_logging=False,
    )
    lap("init")
    try:
        rows = ray.data.range(4, override_num_blocks=2).map_batches(preprocess, batch_format="numpy", **stage("cpu")).take_all()
        lap("data")
        fit = trainer(
            train_loop,
            num_workers=1,
            device="toy",
            train_loop_config={"out": str(out)},
            run=RunConfig(name="stages", storage_path=str(out / "ray_results")),
        ).fit()
        lap("train")
        pool = ActorPool([ray.remote(**stage("cpu"))(Inference).remote() for _ in range(2)])
        served = list(pool.map(lambda actor, i: actor.report.remote(i), range(2)))
        lap("pool")
        print(
            json.dumps(
                {
                    "data": sorted({(r["device"], r["ANYDEVICE"]) for r in rows}),
                    "train": json.loads((out / "train.json").read_text()) if fit.error is None else str(fit.error),
                    "pool": sorted({(r["device"], r["ANYDEVICE"]) for r in served}),
                    "asked": {"data": stage("cpu").get("resources"), "train": stage("toy").get("resources")},
                    "seconds": seconds,
                }
            ),
            flush=True,
        )
    finally:
        ray.shutdown()
