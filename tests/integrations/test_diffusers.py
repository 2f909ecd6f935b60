"""Diffusers on the selected device (main lane: cpu): a tiny UNet2DModel trains, DDPMPipeline samples, offload works."""

from __future__ import annotations

import json
import math

import pytest

from tests.utils import REPO, python

SCRIPT = REPO / "examples" / "ports" / "anydevice" / "diffusers_ddpm.py"


def run_ddpm(device: str, *flags: str, steps: int = 3) -> dict[str, object]:
    """Run the ported diffusers example once; its JSON line."""
    result = python(str(SCRIPT), str(steps), *flags, env={"ANYDEVICE": device, "HF_HUB_OFFLINE": "1"}, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads([line for line in result.stdout.splitlines() if line.startswith('{"')][-1])  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # subprocesses that import torch + HF libraries; slow on a loaded machine
def test_unet_trains_and_ddpm_samples_reproducibly_on_cpu():
    first, second = run_ddpm("cpu"), run_ddpm("cpu")
    assert first["device"] == "cpu" and first["fallback_ops"] == {}
    losses = first["losses"]
    assert isinstance(losses, list) and len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert all(abs(a - b) <= 1e-6 for a, b in zip(losses, second["losses"], strict=True))
    assert abs(first["sample_sum"] - second["sample_sum"]) <= 1e-6  # type: ignore[operator]
    # enable_model_cpu_offload(device=ad.device()) samples the same image as the pipeline on the device.
    assert abs(first["offloaded_sum"] - first["sample_sum"]) <= 1e-5  # type: ignore[operator]
