"""anydevice's verl platform, found by verl's own lookup (the ``verl.plugins`` entry point), and verl's GRPO advantage on cpu."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.utils import REPO, child_env

pytestmark = pytest.mark.verl
pytest.importorskip("verl")

PROBE = """
import json
from verl.plugin.platform import get_platform
from verl.utils import device
p = get_platform()
print(json.dumps({
    "class": type(p).__name__, "device_name": device.get_device_name(), "backend": device.get_nccl_backend(),
    "ray_resource": device.get_resource_name(), "ray_options": p.ray_resource_options(1), "vendor": p.vendor_name,
    "available": p.is_available(), "count": p.device_count(), "memory_allocated": p.memory_allocated(),
    "mem_get_info": p.mem_get_info(), "capability": list(p.get_device_capability()), "ipc": p.is_ipc_supported(),
    "rollout_env": p.rollout_env_vars(),
}))
"""


def probe(**env: str) -> subprocess.CompletedProcess[str]:
    full = child_env({"ANYDEVICE_QUIET": "1", **env})
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=full, timeout=300, cwd=REPO)


def test_verl_finds_the_platform_by_name() -> None:
    done = probe(VERL_PLATFORM="anydevice", ANYDEVICE="cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["class"] == "AnyDevicePlatform" and r["device_name"] == "cpu" and r["vendor"] == "cpu"
    assert r["backend"] == "gloo" and r["ray_resource"] == "CPU" and r["ray_options"] == {}
    assert r["available"] and r["count"] >= 1 and r["ipc"] is False
    assert r["memory_allocated"] is None and r["mem_get_info"] is None  # unknown on cpu: never 0 or (total, total)
    assert r["capability"] == [None, None] and r["rollout_env"]["ANYDEVICE"] == "cpu"


def test_verl_detects_it_instead_of_falling_back_to_nvidia() -> None:
    """Without VERL_PLATFORM, verl probes its platforms; on a CPU host its own would fall back to 'nvidia' with a warning."""
    done = probe(ANYDEVICE="cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["device_name"] == "cpu"


def test_an_unusable_named_device_is_anydevices_clear_error() -> None:
    done = probe(VERL_PLATFORM="anydevice", ANYDEVICE="tpu")
    assert done.returncode != 0 and "Device 'tpu' is not available" in done.stderr


def test_the_memory_module_says_unknown() -> None:
    import anydevice as ad
    from anydevice.errors import UnsupportedDeviceFunctionError
    from anydevice.integrations.verl import AnyDevicePlatform

    ad.use("cpu")
    with pytest.raises(UnsupportedDeviceFunctionError, match="memory_allocated"):
        AnyDevicePlatform().device_module.memory_allocated()


def test_verls_grpo_advantage_on_the_selected_device() -> None:
    """verl's core_algos.compute_grpo_outcome_advantage on tensors ad.to placed, against examples/rl.py's normalisation."""
    import numpy as np
    import torch
    from verl.trainer.ppo import core_algos

    import anydevice as ad

    ad.use("cpu")
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(12, generator=g)
    rewards = torch.zeros(12, 5)
    rewards[:, -1] = scores  # an outcome reward on the last token
    mask = torch.ones(12, 5)
    index = np.array([i // 4 for i in range(12)])  # 3 prompts, groups of 4
    advantages, returns = core_algos.compute_grpo_outcome_advantage(ad.to(rewards), ad.to(mask), index, epsilon=1e-6)
    grouped = scores.view(3, 4)
    expected = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)
    assert advantages.device == ad.device() and advantages.shape == (12, 5)
    torch.testing.assert_close(advantages[:, 0], expected)
    torch.testing.assert_close(returns, advantages)
