"""Train the main job's model with 2 Ray Train workers on a local, loopback-only Ray cluster.

Usage: ray_driver.py OUT_DIR. Each worker writes OUT_DIR/rank-R.json; the driver prints one JSON line.
"""

import json
import sys
from pathlib import Path

import ray
from ray.train import RunConfig

from anydevice.integrations.ray import scaling_config, trainer, worker_env

TRAIN = Path(__file__).resolve().parents[3] / "examples" / "train.py"


def loop(config: dict) -> None:
    import importlib.util
    import os

    import torch.distributed

    import anydevice as ad

    spec = importlib.util.spec_from_file_location("anydevice_main_job", config["train_py"])
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)  # the main job's model, batches and train()
    group_before = torch.distributed.is_initialized()  # Ray made it
    ad.distributed.init()  # adopts Ray's group
    small = ["--d-model", "32", "--layers", "1", "--batch-size", "8", "--seq-len", "32", "--log-every", "0"]
    args = job.parse_args(["--steps", "20", *small])
    result = job.train(args)  # wraps the tiny Llama in DDP over Ray's group
    result.update(
        group_made_by_ray=group_before,
        still_initialized=torch.distributed.is_initialized(),  # shutdown() left Ray's group alone
        pg_backend=torch.distributed.get_backend(),
        env={k: os.environ.get(k) for k in ("ANYDEVICE", "TORCH_DEVICE_BACKEND_AUTOLOAD", "MASTER_ADDR")},
    )
    Path(config["out"], f"rank-{result['rank']}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    ray.init(
        address="local",
        include_dashboard=False,
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        log_to_driver=True,
        configure_logging=False,
    )
    try:
        scaling = scaling_config(2)
        t = trainer(
            loop,
            num_workers=2,
            train_loop_config={"train_py": str(TRAIN), "out": str(out)},
            scaling=scaling,
            run=RunConfig(name="anydevice-ray-test", storage_path=str(out / "ray_results")),
        )
        result = t.fit()
        print(
            json.dumps(
                {
                    "error": str(result.error) if result.error else None,
                    "resources": scaling.resources_per_worker,
                    "use_gpu": scaling.use_gpu,
                    "env": worker_env(),
                    "ranks": [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))],
                }
            ),
            flush=True,
        )
    finally:
        ray.shutdown()
