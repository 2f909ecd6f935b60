"""The tpu plugin's detection: PCI + /dev/vfio scan, three distinct reasons, the peak table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anydevice.contract import detect as d
from anydevice.contract.versions import PairCheck
from anydevice.plugins import tpu
from tests.utils import python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


def _pci_device(root: Path, address: str, vendor: str, device: str, group: str) -> None:
    """A sysfs-shaped PCI function: vendor and device files and an iommu_group symlink."""
    node = root / "devices" / address
    node.mkdir(parents=True)
    (node / "vendor").write_text(vendor + "\n")
    (node / "device").write_text(device + "\n")
    (root / "groups" / group).mkdir(parents=True, exist_ok=True)
    os.symlink(root / "groups" / group, node / "iommu_group")


def test_chips_need_a_google_tpu_id_and_a_vfio_node(tmp_path: Path) -> None:
    _pci_device(tmp_path, "0000:00:04.0", "0x1ae0", "0x0063", "7")  # v5e with /dev/vfio/7
    _pci_device(tmp_path, "0000:00:05.0", "0x1ae0", "0x0062", "8")  # v5p without a vfio node
    _pci_device(tmp_path, "0000:00:06.0", "0x1ae0", "0x0042", "9")  # Google, not a TPU
    _pci_device(tmp_path, "0000:00:07.0", "0x10de", "0x2330", "10")  # NVIDIA
    vfio = tmp_path / "vfio"
    vfio.mkdir()
    for group in ("7", "9", "10"):
        (vfio / group).write_text("")
    assert tpu.tpu_chips(str(tmp_path / "devices"), str(vfio)) == ["v5e"]


def test_no_pci_bus_means_no_chips(tmp_path: Path) -> None:
    assert tpu.tpu_chips(str(tmp_path / "absent"), str(tmp_path / "vfio")) == []


def test_three_situations_have_three_distinct_reasons() -> None:
    nothing = tpu.classify(native=False, xla=False, chips=[])
    package_no_chip = tpu.classify(native=True, xla=False, chips=[])
    chip_no_package = tpu.classify(native=False, xla=False, chips=["v6e"])
    assert (nothing.problem, package_no_chip.problem, chip_no_package.problem) == (
        "package_and_hardware_missing",
        "no_hardware",
        "hardware_without_package",
    )
    assert package_no_chip.reason == "TorchTPU installed, no TPU chip found"
    assert "TPU v6e chip found" in chip_no_package.reason and "pip install torch_tpu" in (chip_no_package.fix or "")
    assert len({nothing.reason, package_no_chip.reason, chip_no_package.reason}) == 3
    assert tpu.classify(native=False, xla=True, chips=[]).reason == "torch_xla installed, no TPU chip found"


def test_available_prefers_torchtpu_and_names_the_generation() -> None:
    native = tpu.classify(native=True, xla=True, chips=["v5e", "v5e"])
    assert native.available and native.count == 2 and native.chip == "TPU v5e"
    assert "using TorchTPU" in native.reason
    assert "torch_xla" in tpu.classify(native=False, xla=True, chips=["v4"]).reason


def test_a_version_mismatch_is_its_own_reason() -> None:
    pair = PairCheck(
        "torch_tpu",
        "0.2.0",
        "2.9.0",
        False,
        "torch_tpu 0.2.0 needs torch>=2.11 but torch 2.9.0 is installed",
        "pip install torch",
    )
    result = tpu.classify(native=True, xla=False, chips=["v5p"], pair=pair)
    assert not result.available and result.problem == "version_mismatch" and "needs torch" in result.reason


def test_peak_comes_from_the_generation_table() -> None:
    assert tpu.PEAK_BF16_TFLOPS == {"TPU v4": 275.0, "TPU v5e": 197.0, "TPU v5p": 459.0, "TPU v6e": 918.0, "TPU v7": 2307.0}
    assert set(tpu.PEAK_BF16_TFLOPS) == {f"TPU {g}" for g in tpu.TPU_DEVICE_IDS.values()}


def test_detect_here_matches_what_is_installed() -> None:
    result = tpu.detect()
    if tpu.tpu_chips():
        pytest.skip("this machine has a TPU")
    assert not result.available
    if d.installed("torch_tpu"):
        assert result.reason == "TorchTPU installed, no TPU chip found"
    elif not d.installed("torch_xla"):
        assert result.problem == "package_and_hardware_missing"


def test_detection_imports_neither_torch_nor_torch_tpu() -> None:
    code = (
        "import json, sys\nfrom anydevice.plugins import tpu\nr = tpu.detect()\n"
        "mods = sorted(m for m in ('torch', 'torch_tpu', 'torch_xla') if m in sys.modules)\n"
        "print(json.dumps({'reason': r.reason, 'mods': mods}))"
    )
    proc = python("-c", code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["mods"] == []
