"""The XLA lane: `from_pretrained(device_map="auto")` follows ANYDEVICE under anydevice (integration imported, anydevice run)."""

from __future__ import annotations

import pytest

from tests.utils import TINY_LLAMA_AUTO, python

pytestmark = pytest.mark.xla
pytest.importorskip("transformers")


@pytest.mark.parametrize(("selected", "device"), [("xla", "xla:0"), ("cpu", "cpu")])
@pytest.mark.parametrize("under", ["integration", "anydevice run", "plain"])
def test_device_map_auto_follows_anydevice(tmp_path, selected: str, device: str, under: str):
    script = tmp_path / "load.py"
    script.write_text(("import anydevice.integrations.transformers\n" if under == "integration" else "") + TINY_LLAMA_AUTO)
    env = {"ANYDEVICE": selected, "HF_HUB_OFFLINE": "1"}
    launch = ["-m", "anydevice", "run"] if under == "anydevice run" else []
    result = python(*launch, str(script), str(tmp_path / "model"), env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    placed = result.stdout.strip().splitlines()[-1]
    if under == "plain":  # without anydevice, Accelerate's own rule: the CPU even with ANYDEVICE=xla
        assert placed == "['cpu']"
    else:
        assert placed == f"['{device}']"
