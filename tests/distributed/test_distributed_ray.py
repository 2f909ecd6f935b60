"""Ray Train: resources asked per device, the same ANYDEVICE in every worker, and a real 2-worker run."""

from __future__ import annotations

import pytest

from tests.distributed.helpers import WORKERS, python

# ImportError too: Ray without its train extra (the verl lane's venv) raises it, not ModuleNotFoundError
ray_train = pytest.importorskip("ray.train", reason="the 'ray' extra is not installed", exc_type=ImportError)

from anydevice.errors import DistributedError, UnknownDeviceError  # noqa: E402
from anydevice.integrations import ray as ad_ray  # noqa: E402
from anydevice.runtime.registry import reset_registry  # noqa: E402


@pytest.mark.parametrize(
    "device, resource, use_gpu",
    [
        ("cpu", None, False),
        ("cuda", "GPU", True),
        ("gpu:1", "GPU", True),
        ("neuron", "neuron_cores", False),
        ("trainium", "neuron_cores", False),
    ],
)
def test_scaling_config_asks_for_the_device(monkeypatch, device, resource, use_gpu):
    """A named device maps to its Ray resource by name alone: no detection, so a CPU-only driver can ask for GPUs."""
    monkeypatch.setenv("ANYDEVICE", device)
    config = ad_ray.scaling_config(4)
    assert config.num_workers == 4
    assert config.use_gpu is use_gpu
    assert config.resources_per_worker == ({resource: 1} if resource else None)


def test_tpu_and_xla_resources(monkeypatch):
    with pytest.raises(DistributedError, match="topology"):  # Ray needs the slice's shape for multi-worker TPU
        ad_ray.scaling_config(4, device="tpu")
    config = ad_ray.scaling_config(4, device="tpu", topology="2x2", accelerator_type="TPU-V6E")
    assert config.use_tpu and config.resources_per_worker == {"TPU": 1}
    monkeypatch.setenv("PJRT_DEVICE", "NEURON")
    assert ad_ray.worker_resource("xla") == "neuron_cores"
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert ad_ray.worker_resource("xla") is None


def test_worker_env_carries_the_selection(monkeypatch):
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("ANYDEVICE_PLUGINS", "cpu,cuda")
    assert ad_ray.worker_env() == {"ANYDEVICE": "cpu", "ANYDEVICE_PLUGINS": "cpu,cuda", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    monkeypatch.delenv("ANYDEVICE_PLUGINS")
    reset_registry()  # the registry read ANYDEVICE_PLUGINS when it loaded
    assert ad_ray.worker_env("tpu") == {"ANYDEVICE": "tpu"}  # torch_tpu is autoloaded: leave autoload on
    run = ad_ray.run_config(device="cuda", name="x")
    assert run.name == "x" and run.worker_runtime_env["env_vars"]["ANYDEVICE"] == "cuda"
    with pytest.raises(UnknownDeviceError, match="Did you mean 'cuda'"):
        ad_ray.worker_env("cudaa")


@pytest.mark.slow
def test_two_ray_workers_train_the_main_job(tmp_path):
    """A real local Ray cluster on loopback, 2 CPU workers: the main job trained data-parallel over Ray's process group."""
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray use 127.0.0.1 as the node address (and MASTER_ADDR) on Linux too
    result = python(WORKERS / "ray_driver.py", tmp_path, timeout=240, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    assert result.returncode == 0, result.stderr[-4000:]
    report = result.json_lines()[-1]
    assert report["error"] is None
    assert report["resources"] is None and report["use_gpu"] is False  # cpu: only the default CPU per worker
    ranks = {row["rank"]: row for row in report["ranks"]}
    assert sorted(ranks) == [0, 1]
    for row in ranks.values():
        assert row["model"] == "tiny"
        assert row["world_size"] == 2
        assert row["group_made_by_ray"] is True and row["still_initialized"] is True
        assert row["pg_backend"] == "gloo"
        assert row["env"] == {"ANYDEVICE": "cpu", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "MASTER_ADDR": "127.0.0.1"}
        assert row["last_loss"] < row["first_loss"]
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    assert ranks[0]["replicas_agree"] is True and ranks[0]["losses"] == ranks[1]["losses"]  # job-wide: the mean over ranks
